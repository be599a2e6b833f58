//! How many connections each address may hold, and from whom.
//!
//! Every open connection is a file descriptor, and the process has as many
//! as its open-files limit. [`Caps::size`] divides that limit (raised to
//! its hard limit at start) between the hub's own files and the two
//! addresses, with a floor that keeps a hub usable at the common default
//! of 1,024; [`Clients`] counts each address's connections per client so
//! that one client (a slowloris, a leaking pool) cannot take every slot
//! and shut the DFSPs out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections per address when neither `--max-connections` nor the
/// open-files limit says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The fewest connections each address is given whatever the open-files
/// limit (accepts beyond what the limit holds fail, and are logged).
const FLOOR_FSPIOP: usize = 64;
const FLOOR_ADMIN: usize = 16;

/// The connection caps of both addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Open connections at most on the FSPIOP address, and from one client.
    pub fspiop: usize,
    pub fspiop_per_client: usize,
    /// The same for the admin address.
    pub admin: usize,
    pub admin_per_client: usize,
    /// File descriptors left for the hub's own use (store, log, callback
    /// and oracle connections); 0 when the limit is unknown.
    pub reserved: u64,
    /// How the caps were chosen, for the start-up log.
    pub why: String,
    /// A configuration that cannot hold, to be warned about.
    pub warning: Option<String>,
}

impl Caps {
    /// The caps for an open-files limit of `open_files` (`None`: unknown),
    /// `--max-connections` (each address) and `--max-connections-per-client`
    /// as given (`None`: not given).
    ///
    /// By default, a quarter of the limit (at least 128, at most 1,024)
    /// is kept for the hub's own files; of the rest, three quarters go to
    /// the FSPIOP address and one to the admin address (operators and
    /// scrapers need few), each at most [`DEFAULT_MAX_CONNECTIONS`]. At
    /// the common 1,024 that is 576 and 192 (a limit of 1,024 used to
    /// leave the FSPIOP address 64). One client may hold half of an
    /// address's connections unless `--max-connections-per-client` says
    /// otherwise (never more than the address's cap).
    pub fn size(
        open_files: Option<u64>,
        max_connections: Option<usize>,
        per_client: Option<usize>,
    ) -> Caps {
        let reserved = open_files.map_or(0, |limit| (limit / 4).clamp(128, 1_024));
        let (fspiop, admin, why) = match (max_connections, open_files) {
            (Some(max), _) => {
                let max = max.max(1);
                (max, max, "--max-connections on each address".to_string())
            }
            (None, None) => (
                DEFAULT_MAX_CONNECTIONS,
                DEFAULT_MAX_CONNECTIONS,
                "the open-files limit is unknown: the default on each address".to_string(),
            ),
            (None, Some(limit)) => {
                let room = usize::try_from(limit.saturating_sub(reserved)).unwrap_or(usize::MAX);
                let fspiop = (room / 4)
                    .saturating_mul(3)
                    .clamp(FLOOR_FSPIOP, DEFAULT_MAX_CONNECTIONS);
                let admin = (room / 4).clamp(FLOOR_ADMIN, DEFAULT_MAX_CONNECTIONS);
                let why = format!(
                    "open-files limit {limit}: {reserved} kept for the hub's own files, the rest 3:1 between the FSPIOP and admin addresses (at most {DEFAULT_MAX_CONNECTIONS} each)"
                );
                (fspiop, admin, why)
            }
        };
        let share = |cap: usize| match per_client {
            Some(max) => max.clamp(1, cap),
            None => (cap / 2).max(1),
        };
        let warning = open_files
            .filter(|limit| (fspiop + admin) as u64 + reserved > *limit)
            .map(|limit| {
                format!(
                    "{fspiop} FSPIOP and {admin} admin connections and {reserved} of the hub's own files exceed the open-files limit of {limit}: accepts will fail before the cap refuses"
                )
            });
        Caps {
            fspiop,
            fspiop_per_client: share(fspiop),
            admin,
            admin_per_client: share(admin),
            reserved,
            why,
            warning,
        }
    }
}

impl Caps {
    /// Says at start what the caps are and why (and warns of caps the
    /// open-files limit cannot hold).
    pub fn log(&self, open_files: Option<u64>) {
        // Not `admin=`/`api=`: those words introduce the `serving` line's
        // addresses, which tools find by them.
        tracing::info!(
            fspiop_connections = self.fspiop,
            fspiop_per_client = self.fspiop_per_client,
            admin_connections = self.admin,
            admin_per_client = self.admin_per_client,
            open_files_limit = open_files.unwrap_or(0),
            why = %self.why,
            "connection caps"
        );
        if let Some(warning) = &self.warning {
            tracing::warn!("{warning}");
        }
    }
}

/// Which client a connection is counted against: its IP address — for
/// IPv6, its /64 (one host holds a whole /64, so counting addresses would
/// cap nobody). An IPv4 address mapped into IPv6 is the IPv4 address.
pub fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
        v4 => v4,
    }
}

/// Open connections of one address, per client.
#[derive(Debug, Default)]
pub struct Clients {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection counted against its client until dropped.
#[derive(Debug)]
pub struct ClientSlot {
    clients: Arc<Clients>,
    client: IpAddr,
}

impl Clients {
    /// Counts one more connection from `client` unless it already holds
    /// `max`: the slot, or how many it holds.
    pub fn admit(self: &Arc<Self>, client: IpAddr, max: usize) -> Result<ClientSlot, usize> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(client).or_insert(0);
        if *count >= max {
            return Err(*count);
        }
        *count += 1;
        Ok(ClientSlot {
            clients: self.clone(),
            client,
        })
    }

    /// Connections open from `client` now.
    pub fn open_from(&self, client: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&client).copied().unwrap_or(0)
    }

    /// Clients with a connection open now (the table holds no others).
    pub fn clients(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// Why a connection was refused at accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The address held its `--max-connections`.
    Full { max: usize },
    /// The client held its share (`--max-connections-per-client`).
    ClientFull { max: usize },
}

/// Told of each connection refused at accept, with the client's address:
/// the hub counts and warns (see `Hub::connection_refusals`).
#[derive(Clone)]
pub struct OnRefused(pub Arc<dyn Fn(IpAddr, Refused) + Send + Sync>);

impl std::fmt::Debug for OnRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnRefused")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_of_1024_keeps_both_addresses_usable() {
        let caps = Caps::size(Some(1_024), None, None);
        assert_eq!(caps.reserved, 256);
        assert_eq!((caps.fspiop, caps.admin), (576, 192));
        assert_eq!((caps.fspiop_per_client, caps.admin_per_client), (288, 96));
        assert_eq!(caps.warning, None);
        assert!(caps.why.contains("1024"), "{}", caps.why);
    }

    #[test]
    fn large_limits_give_the_default_and_keep_1024_for_the_hub() {
        for limit in [65_536, 1_048_576, u64::MAX] {
            let caps = Caps::size(Some(limit), None, None);
            assert_eq!(caps.reserved, 1_024);
            assert_eq!(caps.fspiop, DEFAULT_MAX_CONNECTIONS, "{limit}");
            assert_eq!(caps.admin, DEFAULT_MAX_CONNECTIONS, "{limit}");
            assert_eq!(caps.fspiop_per_client, DEFAULT_MAX_CONNECTIONS / 2);
            assert_eq!(caps.warning, None);
        }
        let caps = Caps::size(Some(20_000), None, None);
        assert_eq!((caps.fspiop, caps.admin), (10_000, 4_744));
        let caps = Caps::size(None, None, None);
        assert_eq!((caps.fspiop, caps.admin), (10_000, 10_000));
        assert_eq!(caps.reserved, 0);
    }

    #[test]
    fn tiny_limits_keep_a_floor_and_say_it_cannot_hold() {
        let caps = Caps::size(Some(256), None, None);
        assert_eq!(caps.reserved, 128);
        assert_eq!((caps.fspiop, caps.admin), (96, 32));
        assert_eq!(caps.warning, None);
        let caps = Caps::size(Some(100), None, None);
        assert_eq!((caps.fspiop, caps.admin), (FLOOR_FSPIOP, FLOOR_ADMIN));
        assert!(caps.warning.is_some());
    }

    #[test]
    fn flags_win_and_a_client_share_is_never_above_the_cap() {
        let caps = Caps::size(Some(1_024), Some(3), None);
        assert_eq!((caps.fspiop, caps.admin), (3, 3));
        assert_eq!(caps.fspiop_per_client, 1);
        let caps = Caps::size(Some(1_024), Some(5_000), Some(100_000));
        assert_eq!((caps.fspiop, caps.fspiop_per_client), (5_000, 5_000));
        assert!(caps.warning.is_some(), "10,000 connections at 1,024 files");
        let caps = Caps::size(Some(1_024), None, Some(10));
        assert_eq!((caps.fspiop_per_client, caps.admin_per_client), (10, 10));
    }

    #[test]
    fn a_client_holds_its_share_and_gets_it_back_as_connections_close() {
        let clients = Arc::new(Clients::default());
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.1".parse().unwrap();
        let held: Vec<ClientSlot> = (0..3).map(|_| clients.admit(a, 3).unwrap()).collect();
        assert_eq!(clients.admit(a, 3).unwrap_err(), 3);
        let other = clients.admit(b, 3).unwrap();
        assert_eq!((clients.open_from(a), clients.clients()), (3, 2));
        drop(held);
        drop(other);
        assert_eq!(clients.clients(), 0, "no client is kept once it has none");
        assert!(clients.admit(a, 3).is_ok());
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64_and_mapped_ipv4_as_ipv4() {
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let same: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_of(one), client_of(same));
        assert_ne!(client_of(one), client_of(other));
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(client_of(mapped), "10.0.0.7".parse::<IpAddr>().unwrap());
    }
}
