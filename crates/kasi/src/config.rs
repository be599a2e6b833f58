//! The command line: flags, `KASI_*` environment variables, and the TOML
//! file given by `--config` (or `KASI_CONFIG`), in that order of
//! precedence, then the built-in defaults.
//!
//! The file holds TOML settings named like the flags
//! (`api-listen = "127.0.0.1:3000"`; `api_listen` is accepted too): strings,
//! whole numbers, `true`/`false`, and arrays of them for the flags that take
//! a list. Only settings that also have a `KASI_*` variable are read, and an
//! unknown key is refused, so a typo is not ignored. A key meant for another
//! command (`data-dir` for `kasi audit` in a file written for `kasi serve`)
//! is known and left alone.
//!
//! The file's values become the flags' defaults before clap parses (the
//! other way, merging after the parse by `ArgMatches::value_source`, would
//! mean putting each value back into a typed struct by hand). So clap itself
//! lets a flag or a variable win over the file, and parses the file's
//! values with each flag's own parser; nothing writes the process's
//! environment. Each value is parsed once beforehand too, so that a bad one
//! is reported with its file and line. One consequence: clap checks
//! `requires`/`conflicts_with` only between values given as flags or
//! variables, not defaults, so the rules between flags are checked again
//! where the settings are planned (`serve::ServeArgs::plan`).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::error::ErrorKind;
use clap::{Arg, ArgAction, Command, CommandFactory, FromArgMatches};

/// Why the command line was not parsed.
#[derive(Debug)]
pub enum Error {
    /// From clap, to print as clap does (`--help` and `--version` too).
    Clap(clap::Error),
    /// The config file: unreadable, not TOML, an unknown key, a bad value.
    File(String),
}

/// Variables read under an older name when the current one is not set
/// (as a default, so a file's setting gives way to them).
const OLDER_NAMES: &[(&str, &str)] = &[("KASI_LOG_LEVEL", "KASI_LOG")];

/// The variable that names the file: not a setting the file may hold.
const CONFIG_VARIABLE: &str = "KASI_CONFIG";

/// Parses `args` (the program's name first) into `C`, with the config
/// file's settings as defaults.
pub fn parse<C: CommandFactory + FromArgMatches>(args: &[OsString]) -> Result<C, Error> {
    let mut command = C::command();
    let (path, subcommands) = probe(&command, args);
    if let Some(path) = path {
        let text = std::fs::read_to_string(&path).map_err(|error| {
            Error::File(format!(
                "cannot read config file {}: {error}",
                path.display()
            ))
        })?;
        let file = ConfigFile::parse(&path, &text).map_err(Error::File)?;
        file.check_keys(&command).map_err(Error::File)?;
        command = file.apply(command, &subcommands).map_err(Error::File)?;
    }
    command = older_names(command);
    let mut matches = command.try_get_matches_from(args).map_err(Error::Clap)?;
    C::from_arg_matches_mut(&mut matches).map_err(Error::Clap)
}

/// The config file named by `--config` or `KASI_CONFIG`, and the
/// subcommands invoked (`["bench", "ledger"]`): a first, lenient parse.
/// Anything it cannot make out is left to the real parse to report.
fn probe(command: &Command, args: &[OsString]) -> (Option<PathBuf>, Vec<String>) {
    let Ok(matches) = command
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(args)
    else {
        return (None, Vec::new());
    };
    let path = matches
        .try_get_one::<PathBuf>("config")
        .ok()
        .flatten()
        .cloned();
    let mut subcommands = Vec::new();
    let mut at = &matches;
    while let Some((name, sub)) = at.subcommand() {
        subcommands.push(name.to_string());
        at = sub;
    }
    (path, subcommands)
}

/// One setting of the file.
#[derive(Debug, PartialEq, Eq)]
struct Setting {
    /// As written.
    key: String,
    line: usize,
    /// One, or an array's.
    values: Vec<String>,
}

/// A parsed config file.
#[derive(Debug)]
struct ConfigFile {
    path: PathBuf,
    /// In the file's order.
    settings: Vec<Setting>,
}

impl ConfigFile {
    /// The file's settings; no key is checked yet.
    fn parse(path: &Path, text: &str) -> Result<ConfigFile, String> {
        let table: BTreeMap<String, toml::Spanned<toml::Value>> =
            toml::from_str(text).map_err(|error| {
                let hint = error
                    .span()
                    .and_then(|span| bare_value_hint(text, span.start))
                    .unwrap_or_default();
                format!(
                    "{}: not a TOML file of settings: {}{hint}",
                    path.display(),
                    error.to_string().trim_end()
                )
            })?;
        let mut settings = Vec::new();
        for (key, value) in table {
            let line = line_of(text, value.span().start);
            let at = format!("{}:{line}: {key}", path.display());
            let values = match value.into_inner() {
                toml::Value::Array(items) => items
                    .into_iter()
                    .map(|item| scalar(item).map_err(|found| format!("{at}: an array of {found}s: {EXPECTED}")))
                    .collect::<Result<Vec<_>, _>>()?,
                toml::Value::Table(_) => {
                    return Err(format!(
                        "{at}: sections are not used: write every setting at the top of the file, `key = value`"
                    ))
                }
                other => vec![scalar(other).map_err(|found| format!("{at}: a {found}: {EXPECTED}"))?],
            };
            settings.push(Setting { key, line, values });
        }
        settings.sort_by_key(|setting| setting.line);
        Ok(ConfigFile {
            path: path.to_path_buf(),
            settings,
        })
    }

    /// Refuses a key that no command reads, naming the known ones.
    fn check_keys(&self, command: &Command) -> Result<(), String> {
        let mut known = BTreeSet::new();
        known_keys(command, &mut known);
        match self
            .settings
            .iter()
            .find(|setting| !known.contains(&key_name(&setting.key)))
        {
            Some(setting) => Err(format!(
                "{}:{}: unknown setting {:?}; known: {}",
                self.path.display(),
                setting.line,
                setting.key,
                known.into_iter().collect::<Vec<_>>().join(", ")
            )),
            None => Ok(()),
        }
    }

    /// `command` with the file's values as the defaults of its own
    /// (global) flags and those of the subcommands invoked, each value
    /// checked by its flag's parser first.
    fn apply(&self, mut command: Command, subcommands: &[String]) -> Result<Command, String> {
        let mut defaults = Vec::new();
        for arg in command.get_arguments() {
            let Some(key) = arg_key(arg) else { continue };
            let Some(setting) = self
                .settings
                .iter()
                .find(|setting| key_name(&setting.key) == key)
            else {
                continue;
            };
            check_value(&command, arg, &setting.values).map_err(|error| {
                format!(
                    "{}:{}: {}: {error}",
                    self.path.display(),
                    setting.line,
                    setting.key
                )
            })?;
            defaults.push((arg.get_id().clone(), setting.values.clone()));
        }
        for (id, values) in defaults {
            command = command.mut_arg(id, |arg| arg.default_values(values));
        }
        if let Some((name, rest)) = subcommands.split_first() {
            if let Some(sub) = command.find_subcommand(name).cloned() {
                let sub = self.apply(sub, rest)?;
                command = command.mut_subcommand(name, |_| sub);
            }
        }
        Ok(command)
    }
}

const EXPECTED: &str = "expected a string, a whole number, true or false (or an array of them)";

/// A TOML value as the text a flag takes; else the value's kind.
fn scalar(value: toml::Value) -> Result<String, &'static str> {
    match value {
        toml::Value::String(text) => Ok(text),
        toml::Value::Integer(number) => Ok(number.to_string()),
        toml::Value::Boolean(switch) => Ok(switch.to_string()),
        other => Err(other.type_str()),
    }
}

/// A hint for the commonest mistake, a value left unquoted
/// (`data-dir = /var/lib/kasi`): TOML needs strings quoted.
fn bare_value_hint(text: &str, at: usize) -> Option<String> {
    let start = text[..at.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?;
    let (key, value) = line.split_once('=')?;
    let value = value.trim();
    let valid = toml::from_str::<toml::Table>(&format!("v = {value}")).is_ok();
    (!valid && !value.is_empty()).then(|| {
        format!(
            "\n(a value other than a number, true or false is a string, in quotes: `{} = \"{}\"`)",
            key.trim(),
            value.trim_matches(|c| c == '"' || c == '\'')
        )
    })
}

/// The 1-based line holding byte `at`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// A key as written (`api_listen`, `API-LISTEN`) in the form the known
/// keys are listed in (`api-listen`).
fn key_name(key: &str) -> String {
    key.to_ascii_lowercase().replace('_', "-")
}

/// The key that sets `arg`: its variable's name without `KASI_`, in
/// kebab-case (`KASI_API_LISTEN`: `api-listen`, the flag's name).
fn arg_key(arg: &Arg) -> Option<String> {
    let variable = arg.get_env()?.to_str()?;
    if variable == CONFIG_VARIABLE {
        return None;
    }
    Some(key_name(variable.strip_prefix("KASI_")?))
}

fn known_keys(command: &Command, known: &mut BTreeSet<String>) {
    known.extend(command.get_arguments().filter_map(arg_key));
    for sub in command.get_subcommands() {
        known_keys(sub, known);
    }
}

/// Whether `values` are what `arg` (of `command`) takes: parsed by the
/// flag's own parser, through clap, on a copy of `command` without
/// environment variables.
fn check_value(command: &Command, arg: &Arg, values: &[String]) -> Result<(), String> {
    if values.len() != 1 && !matches!(arg.get_action(), ArgAction::Append) {
        return Err(format!("takes one value, not {}", values.len()));
    }
    if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
        return match values[0].as_str() {
            "true" | "false" => Ok(()),
            other => Err(format!("{other:?}: expected true or false")),
        };
    }
    let Some(long) = arg.get_long() else {
        return Ok(());
    };
    let mut argv = vec![command.get_name().to_string()];
    argv.extend(values.iter().map(|value| format!("--{long}={value}")));
    let probe = command.clone().mut_args(|arg| arg.env(None));
    match probe.try_get_matches_from(argv) {
        Ok(_) => Ok(()),
        // Only what concerns the value: a missing subcommand or another
        // flag's absence is not this setting's business.
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::InvalidValue
                    | ErrorKind::ValueValidation
                    | ErrorKind::InvalidUtf8
                    | ErrorKind::TooManyValues
                    | ErrorKind::TooFewValues
                    | ErrorKind::WrongNumberOfValues
            ) =>
        {
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            Err(first.trim_start_matches("error: ").to_string())
        }
        Err(_) => Ok(()),
    }
}

/// The older variables' values as defaults where the current ones are
/// not set.
fn older_names(mut command: Command) -> Command {
    for (current, older) in OLDER_NAMES {
        if std::env::var_os(current).is_some() {
            continue;
        }
        let Some(value) = std::env::var_os(older) else {
            continue;
        };
        let ids: Vec<clap::Id> = command
            .get_arguments()
            .filter(|arg| arg.get_env().is_some_and(|env| env == *current))
            .map(|arg| arg.get_id().clone())
            .collect();
        for id in ids {
            let value = value.clone();
            command = command.mut_arg(id, |arg| arg.default_value(value));
        }
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Parser, Subcommand};

    /// A command line shaped like kasi's: a global flag, subcommands with
    /// their own, a list, a switch, a number with a range. Its variables
    /// are this test's own, never set.
    #[derive(Parser, Debug)]
    struct Cli {
        #[arg(
            long,
            global = true,
            env = "KASI_CONFIG_TEST_LEVEL",
            default_value = "info"
        )]
        level: String,
        #[arg(long, global = true, env = "KASI_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(Subcommand, Debug)]
    enum Sub {
        Serve {
            #[arg(long, env = "KASI_CONFIG_TEST_STORE")]
            store: Option<String>,
            #[arg(long, env = "KASI_CONFIG_TEST_LEASE_MS", default_value_t = 2_000,
                  value_parser = clap::value_parser!(u64).range(300..=600_000))]
            lease_ms: u64,
            #[arg(long, env = "KASI_CONFIG_TEST_ALLOW", value_delimiter = ',')]
            allow: Vec<String>,
            #[arg(long, env = "KASI_CONFIG_TEST_PERSISTENT")]
            persistent: bool,
        },
        Audit {
            #[arg(long, env = "KASI_CONFIG_TEST_DATA_DIR", default_value = "kasi-data")]
            data_dir: PathBuf,
        },
    }

    fn with_file(text: &str, args: &[&str]) -> Result<Cli, Error> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kasi.toml");
        std::fs::write(&path, text).unwrap();
        let mut argv: Vec<OsString> = vec!["kasi".into()];
        argv.extend(args.iter().map(OsString::from));
        argv.push("--config".into());
        argv.push(path.into());
        parse::<Cli>(&argv)
    }

    fn file_error(text: &str, args: &[&str]) -> String {
        match with_file(text, args) {
            Err(Error::File(error)) => error,
            other => panic!("expected a file error, got {other:?}"),
        }
    }

    #[test]
    fn a_hash_inside_a_quoted_value_is_kept_and_a_comment_after_it_is_not() {
        let cli = with_file(
            "# the store\nconfig-test-store = \"postgres://kasi:pa#ss@db/kasi\" # with its password\n",
            &["serve"],
        )
        .unwrap();
        let Sub::Serve { store, .. } = cli.command else {
            panic!()
        };
        assert_eq!(store.as_deref(), Some("postgres://kasi:pa#ss@db/kasi"));
    }

    #[test]
    fn toml_values_become_the_flags_values() {
        let cli = with_file(
            "config_test_lease_ms = 5000\nconfig-test-allow = [\"a.example\", \"10.0.0.0/8\"]\nconfig-test-persistent = true\nconfig-test-level = 'debug'\n",
            &["serve"],
        )
        .unwrap();
        assert_eq!(cli.level, "debug");
        let Sub::Serve {
            lease_ms,
            allow,
            persistent,
            ..
        } = cli.command
        else {
            panic!()
        };
        assert_eq!(lease_ms, 5_000);
        assert_eq!(allow, ["a.example", "10.0.0.0/8"]);
        assert!(persistent);
    }

    #[test]
    fn a_list_may_also_be_one_comma_separated_string() {
        let cli = with_file("config-test-allow = \"a.example,b.example\"\n", &["serve"]).unwrap();
        let Sub::Serve { allow, .. } = cli.command else {
            panic!()
        };
        assert_eq!(allow, ["a.example", "b.example"]);
    }

    #[test]
    fn a_flag_wins_over_the_file_and_the_file_over_the_default() {
        let text = "config-test-lease-ms = 5000\nconfig-test-data-dir = \"/from/file\"\n";
        let cli = with_file(text, &["serve", "--lease-ms", "9000"]).unwrap();
        let Sub::Serve { lease_ms, .. } = cli.command else {
            panic!()
        };
        assert_eq!(lease_ms, 9_000);
        // A key of another command is known, and read by it.
        let cli = with_file(text, &["audit"]).unwrap();
        let Sub::Audit { data_dir } = cli.command else {
            panic!()
        };
        assert_eq!(data_dir, Path::new("/from/file"));
        let cli = with_file("", &["audit"]).unwrap();
        let Sub::Audit { data_dir } = cli.command else {
            panic!()
        };
        assert_eq!(data_dir, Path::new("kasi-data"));
    }

    #[test]
    fn refusals_name_the_file_the_line_and_the_fix() {
        for (text, expected) in [
            (
                "\n\nconfig-test-leese-ms = 5000\n",
                ":3: unknown setting \"config-test-leese-ms\"; known: config-test-allow, config-test-data-dir, config-test-lease-ms, config-test-level, config-test-persistent, config-test-store",
            ),
            (
                "config-test-lease-ms = 5\n",
                ":1: config-test-lease-ms: invalid value '5' for '--lease-ms <LEASE_MS>': 5 is not in 300..=600000",
            ),
            (
                "config-test-lease-ms = [400, 500]\n",
                ":1: config-test-lease-ms: takes one value, not 2",
            ),
            (
                "config-test-persistent = \"yes\"\n",
                ":1: config-test-persistent: \"yes\": expected true or false",
            ),
            (
                "config-test-lease-ms = 2.5\n",
                ":1: config-test-lease-ms: a float: expected a string, a whole number",
            ),
            (
                "[serve]\nconfig-test-lease-ms = 500\n",
                ":1: serve: sections are not used",
            ),
            (
                "config-test-store = postgres://db/kasi\n",
                "(a value other than a number, true or false is a string, in quotes: `config-test-store = \"postgres://db/kasi\"`)",
            ),
            ("a = 1\na = 2\n", "not a TOML file of settings"),
        ] {
            let error = file_error(text, &["serve"]);
            assert!(error.contains(expected), "{text:?}:\n{error}\nlacks\n{expected}");
            assert!(error.contains("kasi.toml"), "{error}");
        }
    }

    #[test]
    fn a_bad_value_for_another_command_is_not_this_ones_business() {
        // `audit` never reads the serve settings: checked only by `serve`.
        assert!(with_file("config-test-lease-ms = 5\n", &["audit"]).is_ok());
    }

    #[test]
    fn a_missing_file_is_named() {
        let argv: Vec<OsString> = ["kasi", "serve", "--config", "/nonexistent/kasi.toml"]
            .iter()
            .map(OsString::from)
            .collect();
        match parse::<Cli>(&argv) {
            Err(Error::File(error)) => {
                assert!(
                    error.contains("cannot read config file /nonexistent/kasi.toml"),
                    "{error}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
