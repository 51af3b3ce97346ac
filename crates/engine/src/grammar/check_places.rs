//! Places for grammar checks in children: a few at once over the whole server, and only part
//! of them for one client, so that one client sending grammars that run to their deadline cannot
//! keep every other client's new grammars waiting.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::error::EngineError;

/// Checks that may run at once; later ones wait for a place, up to their deadline.
pub const MAX_GRAMMAR_CHECKS: usize = 4;

/// Checks one client (an address, as the server counts clients) may have running at once: half
/// the places, so that others always find some.
pub const MAX_GRAMMAR_CHECKS_PER_CLIENT: usize = 2;

/// The server's places.
pub(crate) static PLACES: Places = Places::new(MAX_GRAMMAR_CHECKS, MAX_GRAMMAR_CHECKS_PER_CLIENT);

/// Places for running checks, by client.
pub(crate) struct Places {
    running: Mutex<Running>,
    freed: Condvar,
    total: usize,
    per_client: usize,
}

#[derive(Default)]
struct Running {
    total: usize,
    by_client: BTreeMap<IpAddr, usize>,
}

/// A taken place, given back when dropped.
pub(crate) struct Place<'a> {
    places: &'a Places,
    client: Option<IpAddr>,
}

impl Places {
    pub(crate) const fn new(total: usize, per_client: usize) -> Self {
        Self {
            running: Mutex::new(Running {
                total: 0,
                by_client: BTreeMap::new(),
            }),
            freed: Condvar::new(),
            total,
            per_client,
        }
    }

    fn running(&self) -> MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `until` for a place for `client` (none: counted against the whole only);
    /// refused when none came free, saying whether the client's own share was what was full.
    pub(crate) fn take(
        &self,
        client: Option<IpAddr>,
        until: Instant,
    ) -> Result<Place<'_>, EngineError> {
        let mut running = self.running();
        loop {
            let own = client.map_or(0, |c| running.by_client.get(&c).copied().unwrap_or(0));
            let share_full = own >= self.per_client;
            if running.total < self.total && !share_full {
                break;
            }
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                return Err(if share_full {
                    EngineError::ClientGrammarChecksBusy { running: own }
                } else {
                    EngineError::GrammarChecksBusy {
                        running: running.total,
                    }
                });
            };
            running = self
                .freed
                .wait_timeout(running, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        running.total += 1;
        if let Some(client) = client {
            *running.by_client.entry(client).or_default() += 1;
        }
        Ok(Place {
            places: self,
            client,
        })
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut running = self.places.running();
        running.total -= 1;
        if let Some(client) = self.client {
            if let Some(own) = running.by_client.get_mut(&client) {
                *own -= 1;
                if *own == 0 {
                    running.by_client.remove(&client);
                }
            }
        }
        // Every waiter: the one a place fits may be any of them.
        self.places.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn client(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    fn now() -> Instant {
        Instant::now()
    }

    #[test]
    fn a_client_holds_its_share_and_leaves_the_rest_to_others() {
        let places = Places::new(4, 2);
        let first = places.take(client(1), now()).unwrap();
        let _second = places.take(client(1), now()).unwrap();
        // Its share is full: refused at its deadline, as its own share's.
        assert_eq!(
            places.take(client(1), now()).err(),
            Some(EngineError::ClientGrammarChecksBusy { running: 2 })
        );
        // Another client, and requests of no known client, still find places.
        let _other = places.take(client(2), now()).unwrap();
        let _unknown = places.take(None, now()).unwrap();
        // Every place taken: the whole is what is full.
        assert_eq!(
            places.take(client(3), now()).err(),
            Some(EngineError::GrammarChecksBusy { running: 4 })
        );
        // A place given back is the client's again.
        drop(first);
        assert!(places.take(client(1), now()).is_ok());
    }

    #[test]
    fn a_check_waits_for_its_clients_place_until_its_deadline() {
        let places = Places::new(4, 1);
        std::thread::scope(|scope| {
            let held = places.take(client(1), now()).unwrap();
            let waiting = scope.spawn(|| {
                places
                    .take(client(1), now() + Duration::from_secs(60))
                    .map(|_| ())
            });
            drop(held);
            assert!(waiting.join().unwrap().is_ok());
        });
    }
}
