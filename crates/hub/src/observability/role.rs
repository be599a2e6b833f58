//! The role this process plays: the one active hub (it serves and writes)
//! or a standby on the same PostgreSQL store (it answers health checks and
//! waits for the lease). With the embedded SQLite store a hub is always
//! active. Shown on `GET /health` and `/metrics` of both addresses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Shared between the lease keeper (which changes it) and the HTTP
/// handlers (which show it).
#[derive(Debug)]
pub struct Role {
    /// `sqlite` or `postgres`.
    pub store_kind: &'static str,
    /// This process's name in the lease row.
    pub name: String,
    active: AtomicBool,
    store_reachable: AtomicBool,
    /// Who holds the lease as last seen, and its fencing number.
    lease: Mutex<Option<(String, i64)>>,
}

impl Role {
    /// A hub on the embedded store: active, no lease.
    pub fn embedded() -> Role {
        Role {
            store_kind: "sqlite",
            name: String::new(),
            active: AtomicBool::new(true),
            store_reachable: AtomicBool::new(true),
            lease: Mutex::new(None),
        }
    }

    /// A process on a shared store, standby until it takes the lease.
    pub fn shared(store_kind: &'static str, name: &str) -> Role {
        Role {
            store_kind,
            name: name.to_string(),
            active: AtomicBool::new(false),
            store_reachable: AtomicBool::new(true),
            lease: Mutex::new(None),
        }
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    pub fn set_active(&self, active: bool) {
        self.active.store(active, Ordering::Release);
    }

    pub fn store_reachable(&self) -> bool {
        self.store_reachable.load(Ordering::Acquire)
    }

    pub fn set_store_reachable(&self, reachable: bool) {
        self.store_reachable.store(reachable, Ordering::Release);
    }

    /// The lease as last seen: its holder and fencing number.
    pub fn lease(&self) -> Option<(String, i64)> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_lease(&self, holder: &str, fencing: i64) {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = Some((holder.to_string(), fencing));
    }

    pub fn role_name(&self) -> &'static str {
        if self.is_active() {
            "active"
        } else {
            "standby"
        }
    }

    /// The fields `GET /health` adds: role, store, lease holder, whether
    /// the store is reachable.
    pub fn health_fields(&self, body: &mut serde_json::Value) {
        body["role"] = self.role_name().into();
        let mut store = serde_json::json!({
            "kind": self.store_kind,
            "reachable": self.store_reachable(),
        });
        if let Some((holder, fencing)) = self.lease() {
            store["leaseHolder"] = holder.into();
            store["fencing"] = fencing.into();
        }
        if !self.name.is_empty() {
            body["instance"] = self.name.clone().into();
        }
        body["store"] = store;
    }
}
