//! Configuration files. Every setting is a flag, an environment variable
//! (`KASI_*`) and a line in the file given by `--config` (or `KASI_CONFIG`),
//! in that order of precedence. The file holds `key = value` lines named
//! like the flags (`api-listen = "127.0.0.1:3000"` or `api_listen = ...`);
//! `#` starts a comment. Unknown keys are refused, so a typo is not ignored.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use anyhow::{bail, Context as _};
use clap::CommandFactory;

/// Finds `--config FILE` (or `KASI_CONFIG`) and exports the file's settings
/// as the environment variables the flags read, unless already set.
pub fn apply_config_file<C: CommandFactory>(args: &[OsString]) -> anyhow::Result<()> {
    let mut path = std::env::var_os("KASI_CONFIG");
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let text = arg.to_string_lossy();
        if text == "--config" {
            path = iter.next().cloned();
        } else if let Some(value) = text.strip_prefix("--config=") {
            path = Some(OsString::from(value));
        }
    }
    let Some(path) = path else { return Ok(()) };
    let known = known_variables(&C::command());
    for (variable, value) in read(Path::new(&path), &known)? {
        if std::env::var_os(&variable).is_none() {
            // Single-threaded here: nothing else reads the environment yet.
            std::env::set_var(variable, value);
        }
    }
    Ok(())
}

fn known_variables(command: &clap::Command) -> BTreeSet<String> {
    let mut known: BTreeSet<String> = command
        .get_arguments()
        .filter_map(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .collect();
    for sub in command.get_subcommands() {
        known.extend(known_variables(sub));
    }
    known.remove("KASI_CONFIG");
    known
}

fn read(path: &Path, known: &BTreeSet<String>) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    let mut settings = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            bail!(
                "{}:{}: expected `key = value`, found {line:?}",
                path.display(),
                number + 1
            );
        };
        let key = key.trim();
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        let variable = format!("KASI_{}", key.replace('-', "_").to_uppercase());
        if !known.contains(&variable) {
            let keys: Vec<String> = known
                .iter()
                .map(|v| {
                    v.trim_start_matches("KASI_")
                        .to_lowercase()
                        .replace('_', "-")
                })
                .collect();
            bail!(
                "{}:{}: unknown setting {key:?}; known: {}",
                path.display(),
                number + 1,
                keys.join(", ")
            );
        }
        settings.push((variable, value.to_string()));
    }
    Ok(settings)
}
