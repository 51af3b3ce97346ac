use std::time::Duration;

use super::*;

fn registry(total: usize, per_client: usize) -> Arc<Registry> {
    registry_with_reserve(total, per_client, 0)
}

fn registry_with_reserve(total: usize, per_client: usize, reserved: usize) -> Arc<Registry> {
    Arc::new(Registry::new(ConnectionLimits {
        max_connections: total,
        max_connections_per_client: per_client,
        reserved_connections: reserved,
        ..ConnectionLimits::default()
    }))
}

fn client(last: u8) -> ClientId {
    ClientId::of(IpAddr::from([10, 0, 0, last]))
}

#[test]
fn ipv6_clients_count_by_network() {
    let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
    let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(ClientId::of(a), ClientId::of(b));
    assert_ne!(ClientId::of(a), ClientId::of(c));
    let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
    assert_eq!(ClientId::of(mapped), client(1));
}

#[test]
fn every_loopback_address_is_one_client() {
    let this_machine = ClientId::of(IpAddr::from([127, 0, 0, 1]));
    for other in [
        "127.0.0.2",
        "127.6.7.8",
        "127.255.255.254",
        "::1",
        "::ffff:127.0.0.9",
    ] {
        let ip: IpAddr = other.parse().unwrap();
        assert_eq!(ClientId::of(ip), this_machine, "{other}");
    }
    assert_ne!(client(1), this_machine);
    assert_ne!(ClientId::of("::2".parse().unwrap()), this_machine);
}

#[test]
fn reserved_places_take_newcomers_only_when_every_place_is_busy() {
    let registry = registry_with_reserve(2, 2, 1);
    let first = registry.admit(client(1)).unwrap();
    let second = registry.admit(client(1)).unwrap();
    let _busy = (first.state.begin_request(), second.state.begin_request());
    // Every ordinary place is busy: the newcomer gets the reserved one.
    let reserved = registry.admit(client(2)).unwrap();
    assert!(reserved.state.reserved);
    assert!(!first.state.reserved && !second.state.reserved);
    // A reserved place that serves nothing goes to the next newcomer of another client once
    // its connection has had its time to send a head: until then the newcomer is refused.
    assert!(registry.admit(client(3)).is_none());
    *reserved.state.idle_since.lock().unwrap() =
        Instant::now().checked_sub(RESERVED_HEAD_GRACE).unwrap();
    let next = registry.admit(client(3)).unwrap();
    assert!(next.state.reserved);
    let mut reserved_evicted = reserved.evicted;
    assert!(reserved_evicted.try_recv().is_ok());
    // Busy, it is kept, and with no place left the newcomer is refused.
    let _next_busy = next.state.begin_request();
    assert!(registry.admit(client(4)).is_none());
    let table = registry.table();
    assert_eq!((table.open.len(), table.reserved), (3, 1));
    assert!(!table.per_client.contains_key(&client(3)));
    drop(table);
    // An ordinary place given back is an ordinary place again.
    drop(first.slot);
    let ordinary = registry.admit(client(4)).unwrap();
    assert!(!ordinary.state.reserved);
}

#[test]
fn a_flood_of_bare_connections_takes_its_own_reserved_places_not_anothers() {
    let registry = registry_with_reserve(1, 1, 4);
    let ordinary = registry.admit(client(1)).unwrap();
    let _busy = ordinary.state.begin_request();
    // An operator's health check takes a reserved place; its head has yet to arrive.
    let mut health = registry.admit(client(2)).unwrap();
    assert!(health.state.reserved);
    // Another client's bare connections pour in: each takes the place of that client's own
    // oldest, and the health check keeps its place.
    let flood: Vec<Admitted> = (0..20)
        .map(|_| registry.admit(client(3)).unwrap())
        .collect();
    assert!(health.evicted.try_recv().is_err());
    let kept: Vec<Admitted> = flood
        .into_iter()
        .filter_map(|mut c| c.evicted.try_recv().is_err().then_some(c))
        .collect();
    assert_eq!(kept.len(), 3);
    // Once its time to send a head has passed, a silent one is anyone's to take.
    *health.state.idle_since.lock().unwrap() =
        Instant::now().checked_sub(RESERVED_HEAD_GRACE).unwrap();
    let _newest = registry.admit(client(3)).unwrap();
    assert!(health.evicted.try_recv().is_ok());
}

#[test]
fn a_client_at_its_cap_makes_room_with_its_own_idle_connections() {
    let registry = registry(10, 2);
    let first = registry.admit(client(1)).unwrap();
    let second = registry.admit(client(1)).unwrap();
    let other = registry.admit(client(2)).unwrap();
    // Both of client 1's connections are silent: the oldest makes room.
    let mut third = registry.admit(client(1)).unwrap();
    let mut first_evicted = first.evicted;
    assert!(first_evicted.try_recv().is_ok());
    let mut second_evicted = second.evicted;
    assert!(second_evicted.try_recv().is_err());
    let mut other_evicted = other.evicted;
    assert!(other_evicted.try_recv().is_err());
    // Busy connections are never closed: with both busy, the next one is refused.
    let _busy = (second.state.begin_request(), third.state.begin_request());
    assert!(registry.admit(client(1)).is_none());
    assert!(third.evicted.try_recv().is_err());
    // Another client is not affected.
    assert!(registry.admit(client(3)).is_some());
}

#[test]
fn a_full_server_closes_silent_connections_before_idle_ones() {
    let registry = registry(3, 3);
    let idle = registry.admit(client(1)).unwrap();
    drop(idle.state.begin_request());
    let silent = registry.admit(client(2)).unwrap();
    let busy = registry.admit(client(3)).unwrap();
    let _request = busy.state.begin_request();
    let new = registry.admit(client(4)).unwrap();
    let (mut idle_evicted, mut silent_evicted) = (idle.evicted, silent.evicted);
    assert!(silent_evicted.try_recv().is_ok());
    assert!(idle_evicted.try_recv().is_err());
    // Of two idle connections, the one idle the longest makes room.
    std::thread::sleep(Duration::from_millis(5));
    drop(new.state.begin_request());
    let _newer = registry.admit(client(5)).unwrap();
    assert!(idle_evicted.try_recv().is_ok());
    let mut new_evicted = new.evicted;
    assert!(new_evicted.try_recv().is_err());
    assert_eq!(registry.table().open.len(), 3);
}

#[test]
fn answers_left_unread_make_room_after_idle_connections_and_longest_waiting_first() {
    let registry = registry(10, 3);
    let reading = registry.admit(client(1)).unwrap();
    let unread = registry.admit(client(1)).unwrap();
    let unread_longer = registry.admit(client(1)).unwrap();
    let requests = [&reading, &unread, &unread_longer].map(|c| c.state.begin_request());
    let waited = |seconds| {
        Instant::now()
            .checked_sub(Duration::from_secs(seconds))
            .unwrap()
    };
    // One answer is being read (its wait just began); two have waited for seconds.
    requests[0].waits_for_peer();
    for (request, seconds) in [(&requests[1], 3), (&requests[2], 5)] {
        request
            .state
            .stalls()
            .insert(request.request, waited(seconds));
    }
    let fourth = registry.admit(client(1)).unwrap();
    let [mut reading_evicted, mut unread_evicted, mut longer_evicted] =
        [reading.evicted, unread.evicted, unread_longer.evicted];
    assert!(longer_evicted.try_recv().is_ok());
    assert!(unread_evicted.try_recv().is_err());
    // An idle connection goes before an answer left unread.
    drop(fourth.state.begin_request());
    let fifth = registry.admit(client(1)).unwrap();
    let mut fourth_evicted = fourth.evicted;
    assert!(fourth_evicted.try_recv().is_ok());
    assert!(unread_evicted.try_recv().is_err());
    // The peer took the rest and asked for more: its answer no longer waits.
    requests[1].peer_caught_up();
    let _busy = fifth.state.begin_request();
    assert!(registry.admit(client(1)).is_none());
    assert!(reading_evicted.try_recv().is_err());
    assert!(unread_evicted.try_recv().is_err());
}

#[test]
fn of_silent_connections_the_oldest_makes_room_first() {
    let registry = registry(40, 40);
    let silent: Vec<Admitted> = (0..40)
        .map(|_| registry.admit(client(1)).unwrap())
        .collect();
    // Each newcomer closes the oldest silent one left, whatever order the table keeps.
    let newcomers: Vec<Admitted> = (0..3).map(|_| registry.admit(client(2)).unwrap()).collect();
    let mut evicted: Vec<bool> = silent
        .into_iter()
        .map(|mut c| c.evicted.try_recv().is_ok())
        .collect();
    assert_eq!(evicted.drain(..3).collect::<Vec<_>>(), [true; 3]);
    assert!(evicted.iter().all(|e| !e));
    drop(newcomers);
}

#[test]
fn places_are_given_back_when_sockets_close() {
    let registry = registry(1, 1);
    let held = registry.admit(client(1)).unwrap();
    // Upgraded: still held, but no longer closable.
    registry.unwatched(held.state.id);
    assert!(registry.admit(client(2)).is_none());
    drop(held.slot);
    assert!(registry.admit(client(2)).is_some());
    assert!(!registry.table().per_client.contains_key(&client(1)));
}
