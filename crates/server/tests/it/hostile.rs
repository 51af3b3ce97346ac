//! Clients that try to hold the server: connections that never send a byte or only HTTP/2's
//! preface, bodies that trickle in or are declared too long, event sockets that never read, all
//! of it from many loopback addresses; and what must not leak or pass: the API key in logs,
//! requests of other sites' pages, unknown models, tuning nobody confirmed. Real sockets against
//! a real server over the default model, with short deadlines so that the tests run fast.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use engine::{Engine, EngineConfig};
use playground::Playground;
use serde_json::{json, Value};
use server::{AccessPolicy, ApiKey, ConnectionLimits};
use tungstenite::client::IntoClientRequest;
use tungstenite::Message;

use crate::common::*;

const KEY: &str = "hostile-test-key-0123456789";
/// How long the probes may take while the server is under attack: generous, since the machine
/// is shared and the attack itself keeps it busy.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// What a test allows for on top of a deadline of the server's before it must have acted.
const SLACK: Duration = Duration::from_secs(15);

fn limits() -> ConnectionLimits {
    ConnectionLimits {
        header_timeout: Duration::from_secs(2),
        body_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(2),
        keep_alive_interval: Duration::from_secs(1),
        ..ConnectionLimits::default()
    }
}

/// The tests measure the process's memory, count its sockets and read all it logs: one at a
/// time, in a process of their own ([`crate::alone`]).
fn exclusive() -> MutexGuard<'static, ()> {
    static EXCLUSIVE: Mutex<()> = Mutex::new(());
    EXCLUSIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the server logs, from the start of the first test on.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "warn,server=debug,tower_http=debug,playground=debug,hyper_util=debug",
            ))
            .with_ansi(false)
            .with_writer(move || Capture(sink.clone()))
            .init();
        logs
    })
    .clone()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logged_lines() -> Vec<String> {
    let logs = logs();
    let bytes = logs.lock().unwrap_or_else(PoisonError::into_inner);
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// 600 sockets of each kind and their server-side ends need more descriptors than some
/// machines give a process by default.
fn raise_descriptor_limit() {
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        let mut limit = std::mem::zeroed::<libc::rlimit>();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < 8192 {
            limit.rlim_cur = limit.rlim_max.min(8192);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// The default model over `store`.
fn default_playground(store: store::Store) -> Playground {
    let model = models::default_model_path().expect("default model available");
    let mut config = EngineConfig::new(model);
    config.ctx_size = Some(1024);
    let engine = Arc::new(Engine::load(config.clone()).expect("model loads"));
    Playground::new(engine, store, config)
}

/// The server under test: the default model, an API key and short deadlines.
fn server() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| {
        logs();
        serve_limited(
            default_playground,
            None,
            AccessPolicy {
                api_key: Some(ApiKey::new(KEY).unwrap()),
                ..AccessPolicy::default()
            },
            limits(),
        )
    })
}

/// The limits of [`patient_server`]: the default body deadline (60 s), so that what ends a
/// body early is the rule under test; pings far enough apart that sockets opened in a row are
/// all still open when the last one is.
fn patient_limits() -> ConnectionLimits {
    ConnectionLimits {
        header_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(2),
        keep_alive_interval: Duration::from_secs(5),
        ..ConnectionLimits::default()
    }
}

/// A server as `medusa serve` runs on loopback by default: no key, so any local user may send
/// bodies and open event sockets.
fn patient_server() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| {
        logs();
        serve_limited(
            default_playground,
            None,
            AccessPolicy::default(),
            patient_limits(),
        )
    })
}

/// Connects from loopback addresses other than 127.0.0.1, as any local user can.
struct LoopbackDialer {
    runtime: tokio::runtime::Runtime,
    server: std::net::SocketAddr,
}

impl LoopbackDialer {
    fn new(base: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        let server = address(base).parse().expect("the server's address");
        Self { runtime, server }
    }

    /// A connection from 127.0.0.`host`.
    fn connect(&self, host: u8) -> TcpStream {
        self.connect_receiving(host, None)
    }

    /// A connection from 127.0.0.`host`, its receive buffer set to `receive_buffer` bytes
    /// before it connects (so that the window it offers stays that small).
    fn connect_receiving(&self, host: u8, receive_buffer: Option<u32>) -> TcpStream {
        let from = std::net::SocketAddr::from(([127, 0, 0, host], 0));
        self.runtime
            .block_on(async {
                let socket = tokio::net::TcpSocket::new_v4()?;
                if let Some(size) = receive_buffer {
                    socket.set_recv_buffer_size(size)?;
                }
                socket.bind(from)?;
                let stream = socket.connect(self.server).await?.into_std()?;
                stream.set_nonblocking(false)?;
                Ok::<_, std::io::Error>(stream)
            })
            .unwrap_or_else(|err| panic!("cannot connect from {from}: {err}"))
    }
}

/// What the server sent on `stream` until `enough` says it is all, the server closed, or
/// `wait` passed.
fn read_until(stream: &mut TcpStream, wait: Duration, enough: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + wait;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !enough(&String::from_utf8_lossy(&answer)) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        stream.set_read_timeout(Some(left)).expect("read timeout");
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// What the server sent on `stream` before it closed it (end of stream or reset); none if it is
/// still open at `deadline`.
fn read_to_close(stream: &mut TcpStream, deadline: Instant) -> Option<String> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        stream.set_read_timeout(Some(left)).expect("read timeout");
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None
            }
            Err(_) => break,
        }
    }
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// Whether `text` holds a whole answer: a 101's head, or a head and the body its
/// `Content-Length` announces.
fn whole_answer(text: &str) -> bool {
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    if head.starts_with("HTTP/1.1 101") {
        return true;
    }
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .is_some_and(|length| body.len() >= length)
}

fn status_of(answer: &str) -> Option<u16> {
    answer.split(' ').nth(1)?.parse().ok()
}

/// An event socket's opening request, as written.
fn event_socket_request(key: Option<&str>) -> String {
    let authorization = key
        .map(|key| format!("Authorization: Bearer {key}\r\n"))
        .unwrap_or_default();
    format!(
        "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{authorization}\r\n"
    )
}

/// Asks to open an event socket on `stream`; the answer (a 101's head, or a whole refusal).
fn open_event_socket(stream: &mut TcpStream, key: Option<&str>) -> String {
    stream
        .write_all(event_socket_request(key).as_bytes())
        .expect("sends the upgrade");
    read_until(stream, PROBE_TIMEOUT, whole_answer)
}

fn address(base: &str) -> String {
    base.trim_start_matches("http://").to_owned()
}

/// The status of `path`, which must answer within [`PROBE_TIMEOUT`], on a connection of its own.
fn probe(base: &str, path: &str, key: Option<&str>) -> u16 {
    let agent = ureq::AgentBuilder::new().timeout(PROBE_TIMEOUT).build();
    let mut request = agent.get(&format!("{base}{path}"));
    if let Some(key) = key {
        request = request.set("Authorization", &format!("Bearer {key}"));
    }
    let started = Instant::now();
    match request.call() {
        Ok(response) => response.status(),
        Err(ureq::Error::Status(status, _)) => status,
        Err(err) => panic!(
            "{path} did not answer within {PROBE_TIMEOUT:?} (after {:?}): {err}",
            started.elapsed()
        ),
    }
}

fn keyed_post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let request = agent()
        .post(&format!("{base}{path}"))
        .set("Authorization", &format!("Bearer {KEY}"));
    let (status, response) = send(request, Some(&body.to_string()));
    (status, response.into_json().expect("JSON answer"))
}

/// The process's resident memory in KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS")
}

/// Whether the server closed `stream` (end of stream or reset) by `deadline`; what it sent
/// before (HTTP/2's settings) is dropped.
fn closed_by(stream: &mut TcpStream, deadline: Instant) -> bool {
    read_to_close(stream, deadline).is_some()
}

/// How a trickled body ended: after how long, and the answer if one came.
struct Trickled {
    after: Duration,
    answer: String,
}

/// Sends a request whose body declares 100,000 bytes and trickles one every 300 ms (well
/// within any pause a per-chunk timeout allows) until the server answers or closes.
fn trickle_body(address: String, give_up: Duration) -> thread::JoinHandle<Trickled> {
    thread::spawn(move || {
        let mut stream = TcpStream::connect(&address).expect("connects");
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n\
             Content-Length: 100000\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).expect("sends the head");
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("read timeout");
        let started = Instant::now();
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while started.elapsed() < give_up {
            if answer.is_empty() && stream.write_all(b" ").is_err() {
                break;
            }
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    // Once the answer has started, a pause means it is whole.
                    if !answer.is_empty() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        Trickled {
            after: started.elapsed(),
            answer: String::from_utf8_lossy(&answer).into_owned(),
        }
    })
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[test]
fn silent_connections_prefaces_and_trickled_bodies_lock_nobody_out() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::silent_connections_prefaces_and_trickled_bodies_lock_nobody_out",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    raise_descriptor_limit();
    let base = server();
    let address = address(base);
    // Warm: the first answers allocate what every later one reuses.
    for _ in 0..3 {
        assert_eq!(probe(base, "/health", None), 200);
        assert_eq!(probe(base, "/v1/models", Some(KEY)), 200);
    }
    let before = resident_kib();
    let limits = limits();

    let attack_started = Instant::now();
    let mut held = Vec::new();
    for _ in 0..600 {
        held.push(TcpStream::connect(&address).expect("a silent connection"));
    }
    for _ in 0..600 {
        let mut stream = TcpStream::connect(&address).expect("an HTTP/2 connection");
        // A connection the server closed already may refuse the preface: that is fine.
        let _ = stream.write_all(H2_PREFACE);
        held.push(stream);
    }
    let trickles: Vec<_> = (0..50)
        .map(|_| trickle_body(address.clone(), limits.body_timeout + SLACK))
        .collect();

    // While all of them are held, health checks and clients with the key get in.
    for _ in 0..3 {
        assert_eq!(probe(base, "/health", None), 200);
        assert_eq!(probe(base, "/v1/models", Some(KEY)), 200);
        assert_eq!(probe(base, "/v1/models", None), 401);
        thread::sleep(Duration::from_millis(200));
    }

    // Nothing that sent no request head outlives the head deadline by much.
    let deadline = attack_started + limits.header_timeout + SLACK;
    let open = held
        .iter_mut()
        .map(|stream| closed_by(stream, deadline))
        .filter(|closed| !closed)
        .count();
    assert_eq!(open, 0, "connections without a request still open");

    // Trickled bodies are cut at their total deadline, with a 408 for those still reading.
    let mut answered = 0;
    for trickle in trickles {
        let ended = trickle.join().expect("trickle thread");
        assert!(
            ended.after < limits.body_timeout + SLACK,
            "a trickled body was held for {:?}",
            ended.after
        );
        if !ended.answer.is_empty() {
            assert!(ended.answer.starts_with("HTTP/1.1 408"), "{}", ended.answer);
            assert!(ended.answer.contains("body_timeout"), "{}", ended.answer);
            answered += 1;
        }
    }
    assert!(answered > 0, "no trickled body got its 408");

    assert_eq!(probe(base, "/health", None), 200);
    assert_eq!(probe(base, "/v1/models", Some(KEY)), 200);
    drop(held);
    thread::sleep(Duration::from_millis(500));
    let after = resident_kib();
    eprintln!("resident memory: {before} KiB before, {after} KiB after");
    assert!(
        after <= before + before / 10,
        "memory grew from {before} KiB to {after} KiB"
    );
}

#[test]
fn a_trickled_body_gets_408_at_its_total_deadline() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::a_trickled_body_gets_408_at_its_total_deadline",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    let base = server();
    let mut stream = TcpStream::connect(address(base)).expect("connects");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).expect("sends");
    let started = Instant::now();
    stream
        .set_read_timeout(Some(limits().body_timeout + SLACK))
        .expect("timeout");
    let mut answer = String::new();
    let read = stream.read_to_string(&mut answer);
    assert!(read.is_ok(), "no answer: {read:?}");
    assert!(
        started.elapsed() < limits().body_timeout + SLACK,
        "{:?}",
        started.elapsed()
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or_default())
        .unwrap_or_else(|_| panic!("not JSON: {answer}"));
    assert_eq!(body["error"]["code"], "body_timeout", "{body}");
    // The connection closes after the answer (read_to_string reached its end).
}

/// An event socket to the server, whose receive buffer is kept small so that a socket that is
/// not read fills quickly.
fn event_socket(base: &str) -> tungstenite::WebSocket<TcpStream> {
    use std::os::fd::AsRawFd;
    let stream = TcpStream::connect(address(base)).expect("connects");
    let size: libc::c_int = 4096;
    // SAFETY: setsockopt reads `size` for the length given, on a socket this function owns.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .expect("write timeout");
    let url = format!("{}/api/events", base.replace("http://", "ws://"));
    let mut request = url.into_client_request().expect("request");
    request.headers_mut().insert(
        "Authorization",
        format!("Bearer {KEY}").parse().expect("header"),
    );
    let (socket, _) = tungstenite::client(request, stream).expect("the event socket opens");
    socket
}

#[test]
fn event_sockets_that_are_not_read_are_cut_off_and_memory_stays_flat() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::event_sockets_that_are_not_read_are_cut_off_and_memory_stays_flat",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    let base = server();
    assert_eq!(probe(base, "/health", None), 200);
    let before = resident_kib();

    // Each request is refused with a message the page never reads: queued without a bound,
    // 100,000 of them per socket would be some 15 MB.
    let floods: Vec<_> = (0..20)
        .map(|_| {
            let base = base.to_owned();
            thread::spawn(move || {
                let mut socket = event_socket(&base);
                let mut sent = 0;
                for _ in 0..100_000 {
                    let bad = Message::text(r#"{"type":"status","every_ms":1}"#);
                    if socket.send(bad).is_err() {
                        break;
                    }
                    sent += 1;
                }
                let closed = closed_by(socket.get_mut(), Instant::now() + SLACK);
                (sent, closed)
            })
        })
        .collect();
    // Status updates that are never read: snapshots, at most one of which waits, until the
    // socket is closed for answering no ping.
    let mut watchers: Vec<_> = (0..20)
        .map(|_| {
            let mut socket = event_socket(base);
            socket
                .send(Message::text(r#"{"type":"status","every_ms":100}"#))
                .expect("asks for status updates");
            socket
        })
        .collect();
    for flood in floods {
        let (sent, closed) = flood.join().expect("flood thread");
        assert!(
            closed,
            "a socket that read nothing stayed open ({sent} sent)"
        );
    }
    thread::sleep(Duration::from_secs(3));
    assert_eq!(probe(base, "/health", None), 200);
    let after = resident_kib();
    eprintln!("resident memory: {before} KiB before, {after} KiB after");
    assert!(
        after <= before + before / 10,
        "memory grew from {before} KiB to {after} KiB"
    );

    // The watchers read nothing, so they answered no ping: closed.
    let deadline = Instant::now() + limits().keep_alive_interval * 2 + SLACK;
    let open = watchers
        .iter_mut()
        .map(|watcher| closed_by(watcher.get_mut(), deadline))
        .filter(|closed| !closed)
        .count();
    assert_eq!(open, 0, "event sockets that answer no ping still open");

    // A page that reads answers the pings as it reads (browsers and tungstenite do so
    // themselves) and stays open round after round.
    let mut reader = event_socket(base);
    reader
        .send(Message::text(r#"{"type":"status","every_ms":100}"#))
        .expect("asks for status updates");
    reader
        .get_mut()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let rounds = Instant::now() + limits().keep_alive_interval * 5;
    let (mut updates, mut pings) = (0, 0);
    while Instant::now() < rounds {
        match reader
            .read()
            .expect("the socket stays open while it is read")
        {
            Message::Text(text) => {
                let message: Value = serde_json::from_str(text.as_str()).expect("JSON");
                assert_eq!(message["type"], "status", "{message}");
                updates += 1;
            }
            Message::Ping(_) => pings += 1,
            other => panic!("unexpected message: {other:?}"),
        }
    }
    assert!(updates > 0 && pings > 0, "{updates} updates, {pings} pings");
}

#[test]
fn event_sockets_from_many_loopback_addresses_lock_nobody_out() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::event_sockets_from_many_loopback_addresses_lock_nobody_out",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    raise_descriptor_limit();
    let base = server();
    let dialer = LoopbackDialer::new(base);
    // Sockets of a client with the key, even: they cannot hold every place either. None has a
    // generation going, so each newcomer takes the place of the oldest, which is closed.
    let mut upgraded = Vec::new();
    for attempt in 0..515u32 {
        let mut stream = dialer.connect(2 + (attempt % 5) as u8);
        let answer = open_event_socket(&mut stream, Some(KEY));
        assert_eq!(
            status_of(&answer),
            Some(101),
            "attempt {attempt}: {answer:?}"
        );
        upgraded.push(stream);
    }

    // While they are held, health checks and clients with the key get in.
    for _ in 0..3 {
        assert_eq!(probe(base, "/health", None), 200);
        assert_eq!(probe(base, "/v1/models", Some(KEY)), 200);
        thread::sleep(Duration::from_millis(200));
    }

    // None of them read, so none answered a ping: all closed.
    let deadline = Instant::now() + limits().keep_alive_interval * 2 + SLACK;
    let open = upgraded
        .iter_mut()
        .map(|stream| closed_by(stream, deadline))
        .filter(|closed| !closed)
        .count();
    assert_eq!(open, 0, "event sockets that answer no ping still open");
    assert_eq!(probe(base, "/health", None), 200);
}

/// An event socket that answers pings and reads what comes until it closes, on a thread of its
/// own; the thread ends with the close frame's code and reason.
fn idle_event_socket(base: &str) -> thread::JoinHandle<Option<(u16, String)>> {
    let url = format!("{}/api/events", base.replace("http://", "ws://"));
    let (mut socket, response) = tungstenite::connect(url).expect("the event socket opens");
    assert_eq!(response.status(), 101);
    thread::spawn(move || loop {
        match socket.read() {
            Ok(Message::Close(frame)) => {
                return frame.map(|frame| (u16::from(frame.code), frame.reason.to_string()));
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    })
}

#[test]
fn event_sockets_held_open_doing_nothing_give_their_place_to_a_page() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::event_sockets_held_open_doing_nothing_give_their_place_to_a_page",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    logs();
    let limits = ConnectionLimits {
        max_event_sockets: 4,
        ..patient_limits()
    };
    let base = serve_limited(default_playground, None, AccessPolicy::default(), limits);
    // Another local client holds every place with sockets that answer pings and do nothing.
    let mut held: Vec<_> = (0..limits.max_event_sockets)
        .map(|_| idle_event_socket(&base))
        .collect();

    // The page still gets its socket: the oldest idle one gives its place up, told why.
    let url = format!("{}/api/events", base.replace("http://", "ws://"));
    let (mut page, response) = tungstenite::connect(url).expect("the page's socket opens");
    assert_eq!(response.status(), 101);
    let first = held.remove(0).join().expect("reader");
    assert_eq!(first, Some((1013, "replaced".to_owned())));

    // The page chats on it while the other client opens more: those replace its own idle
    // sockets, never the page's while its generation goes.
    let request = json!({
        "messages": [{"role": "user", "content": "Count to twenty."}],
        "max_tokens": 48,
        "sampling": {"temperature": 0.0},
    });
    page.send(Message::Text(
        json!({"type": "generate", "id": 1, "request": request})
            .to_string()
            .into(),
    ))
    .expect("sends the request");
    let mut newer: Vec<_> = (0..limits.max_event_sockets - 1)
        .map(|_| idle_event_socket(&base))
        .collect();
    let finished = loop {
        match page.read().expect("the page's socket stays open") {
            Message::Text(text) => {
                let message: Value = serde_json::from_str(text.as_str()).expect("JSON");
                assert_ne!(message["type"], "refused", "{message}");
                if message["event"]["type"] == "finished" {
                    break message;
                }
            }
            Message::Close(frame) => panic!("the page's socket was closed: {frame:?}"),
            _ => {}
        }
    };
    assert_ne!(finished["event"]["stop_reason"], "cancelled", "{finished}");
    for socket in held.drain(..) {
        assert_eq!(
            socket.join().expect("reader"),
            Some((1013, "replaced".to_owned()))
        );
    }
    page.close(None).expect("closes");
    drop(page);
    newer.clear();
}

/// The limits of the server that [`answers_nobody_reads_lock_nobody_out_and_are_cut_off_at_the_write_deadline`]
/// fills: a client's share small enough to fill with exports.
fn small_share_limits() -> ConnectionLimits {
    ConnectionLimits {
        max_connections_per_client: 6,
        write_timeout: Duration::from_secs(6),
        ..limits()
    }
}

/// A connection from 127.0.0.`host` whose receive buffer holds little, so that what the server
/// writes to it and nobody reads soon fills every buffer on the way.
fn non_reading_connection(dialer: &LoopbackDialer, host: u8) -> TcpStream {
    dialer.connect_receiving(host, Some(4096))
}

/// Whether the peer has closed or reset `stream`, seen from its TCP state without reading what
/// it holds unread.
fn peer_gone(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: getsockopt writes at most `length` bytes into `info`, which has that size.
    unsafe {
        let mut info = std::mem::zeroed::<libc::tcp_info>();
        let mut length = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let read = libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut length,
        );
        assert_eq!(read, 0, "TCP_INFO");
        // ESTABLISHED is 1; a reset leaves CLOSE (7), an orderly close CLOSE_WAIT (8).
        info.tcpi_state != 1
    }
}

#[test]
fn answers_nobody_reads_lock_nobody_out_and_are_cut_off_at_the_write_deadline() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::answers_nobody_reads_lock_nobody_out_and_are_cut_off_at_the_write_deadline",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    logs();
    let limits = small_share_limits();
    let base = serve_limited(default_playground, None, AccessPolicy::default(), limits);
    // An export of 12 MB: far more than the buffers between server and client hold.
    let (status, report) = post_to(&base, "/api/runs/import", &heavy_document(2, 3_000_000));
    assert_eq!(status, 200, "{report}");

    // The client's whole share asks for the export and reads only the answer's head.
    let dialer = LoopbackDialer::new(&base);
    let mut unread: Vec<TcpStream> = (0..limits.max_connections_per_client)
        .map(|i| {
            let mut stream = non_reading_connection(&dialer, 2 + i as u8);
            stream
                .write_all(b"GET /api/runs/export?format=json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .expect("asks for the export");
            let head = read_until(&mut stream, PROBE_TIMEOUT, |text| text.contains("\r\n\r\n"));
            assert_eq!(status_of(&head), Some(200), "{head}");
            stream
        })
        .collect();
    // Long enough for every answer to have filled the buffers and waited past the point where
    // its place may go to a newcomer.
    thread::sleep(Duration::from_secs(4));

    // The same client (every loopback address is one) is still served: each newcomer takes the
    // place of an answer nobody reads, not a reserved place that serves only health checks.
    assert_eq!(probe(&base, "/api/info", None), 200);
    let events = generate(
        &base,
        &json!({"messages": [{"role": "user", "content": "Count to three."}], "max_tokens": 4}),
    )
    .expect("a generation beside answers nobody reads");
    let finished = events.last().expect("events");
    assert_eq!(finished["type"], "finished", "{finished}");

    // Every one of them is closed by the write deadline, reset rather than left to drain.
    let deadline = Instant::now() + limits.write_timeout + SLACK;
    while unread.iter().any(|stream| !peer_gone(stream)) {
        assert!(
            Instant::now() < deadline,
            "an answer nobody reads kept its connection past the write deadline"
        );
        thread::sleep(Duration::from_millis(200));
    }
    assert!(logged_lines()
        .iter()
        .any(|line| line.contains("its peer took none of an answer in time")));
    unread.clear();
    assert_eq!(probe(&base, "/api/info", None), 200);
}

#[test]
fn a_connection_beyond_every_place_is_answered_busy_not_reset() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::a_connection_beyond_every_place_is_answered_busy_not_reset",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    logs();
    let limits = ConnectionLimits {
        max_connections: 2,
        max_connections_per_client: 2,
        reserved_connections: 1,
        ..patient_limits()
    };
    let access = AccessPolicy {
        api_key: Some(ApiKey::new(KEY).unwrap()),
        ..AccessPolicy::default()
    };
    let base = serve_limited(default_playground, None, access, limits);
    // Every place, the reserved one too, holds a request with the key whose body is still on
    // its way; each is in flight once the server asks for its body (100 Continue).
    let held: Vec<TcpStream> = (0..limits.max_connections + limits.reserved_connections)
        .map(|_| {
            let mut stream = TcpStream::connect(address(&base)).expect("connects");
            let head = format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n\
                 Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).expect("sends the head");
            let interim = read_until(&mut stream, PROBE_TIMEOUT, |text| text.contains("\r\n\r\n"));
            assert!(interim.starts_with("HTTP/1.1 100"), "{interim:?}");
            stream.write_all(b"{").expect("sends a byte of the body");
            stream
        })
        .collect();
    // The next connection, even with the key, finds no place: it is told the server is busy,
    // not reset.
    let mut stream = TcpStream::connect(address(&base)).expect("connects");
    let request =
        format!("GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .expect("sends the request");
    let answer = read_to_close(&mut stream, Instant::now() + PROBE_TIMEOUT)
        .expect("the connection is closed after its answer");
    assert_eq!(status_of(&answer), Some(503), "{answer}");
    assert!(answer.contains("server_busy"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    drop(held);
}

#[test]
fn slow_bodies_from_many_loopback_addresses_are_refused_early_and_lock_nobody_out() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::slow_bodies_from_many_loopback_addresses_are_refused_early_and_lock_nobody_out",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    raise_descriptor_limit();
    let base = patient_server();
    let dialer = LoopbackDialer::new(base);
    let started = Instant::now();
    // 128 from each of five addresses, each body declared 1000 bytes long and never sent past
    // its first byte: more than the server's 512 places.
    let slow: Vec<TcpStream> = (0..640u32)
        .map(|attempt| {
            let mut stream = dialer.connect(2 + (attempt % 5) as u8);
            let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                        Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{";
            // A connection closed at once (no place left) may refuse it: that is fine.
            let _ = stream.write_all(head.as_bytes());
            stream
        })
        .collect();

    // While they are held, health checks get in.
    for _ in 0..3 {
        assert_eq!(probe(base, "/health", None), 200);
        thread::sleep(Duration::from_millis(200));
    }

    // Every one of them ends well before the 60 s body deadline: read too slowly (408), or
    // refused on a place kept for health checks (503), or closed for want of a place.
    let well_before_the_deadline = started + Duration::from_secs(20);
    let mut too_slow = 0;
    for mut stream in slow {
        let answer = read_to_close(&mut stream, well_before_the_deadline)
            .unwrap_or_else(|| panic!("a slow body still held after {:?}", started.elapsed()));
        match status_of(&answer) {
            Some(408) => {
                assert!(answer.contains("body_too_slow"), "{answer}");
                too_slow += 1;
            }
            Some(503) => assert!(answer.contains("server_busy"), "{answer}"),
            _ => assert!(answer.is_empty(), "{answer}"),
        }
    }
    assert!(too_slow > 0, "no slow body got its 408");
    assert_eq!(probe(base, "/health", None), 200);
}

#[test]
fn a_body_declared_over_the_limit_is_refused_before_it_is_read() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::a_body_declared_over_the_limit_is_refused_before_it_is_read",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    let base = patient_server();
    for (path, declared) in [
        ("/v1/chat/completions", 99_999_999_999u64),
        // Over the limit, yet little enough that what the client sends is still read.
        ("/v1/chat/completions", 2_000_000),
        ("/api/runs/import", 99_999_999_999),
    ] {
        let mut stream = TcpStream::connect(address(base)).expect("connects");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {declared}\r\n\r\n{{"
        );
        stream.write_all(head.as_bytes()).expect("sends the head");
        let started = Instant::now();
        let answer = read_until(&mut stream, Duration::from_secs(20), |text| {
            text.contains("body_too_large")
        });
        // The body never comes: well before its 60 s deadline, the answer did.
        assert!(
            answer.starts_with("HTTP/1.1 413"),
            "{path} with {declared} bytes declared, after {:?}: {answer:?}",
            started.elapsed()
        );
        assert!(answer.contains("body_too_large"), "{answer}");
    }
}

#[test]
fn requests_marked_as_from_another_site_cannot_change_state() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::requests_marked_as_from_another_site_cannot_change_state",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    let base = server();
    let post = |site: &str| {
        let request = agent()
            .post(&format!("{base}/v1/completions"))
            .set("Authorization", &format!("Bearer {KEY}"))
            .set("Sec-Fetch-Site", site);
        let (status, response) = send(request, Some(r#"{"prompt": 5}"#));
        let body: Value = response.into_json().expect("JSON answer");
        (status, body)
    };
    for site in ["cross-site", "same-site"] {
        assert_error(post(site), 403, "cross_site_request");
    }
    // The UI's own requests, and those typed in: on to the handler, which finds the body wrong.
    for site in ["same-origin", "none"] {
        assert_error(post(site), 400, "invalid_parameter");
    }
}

#[test]
fn the_key_never_reaches_the_logs() {
    if crate::alone::in_group_process("hostile::", "hostile::the_key_never_reaches_the_logs") {
        return;
    }
    let _one_at_a_time = exclusive();
    let base = server();
    // Refused: a token in the query string lets only GETs of pages in.
    let (status, answer) = raw_http(
        base,
        &format!(
            "POST /api/generate?token={KEY}&x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n\
             Connection: close\r\n\r\n{{}}"
        ),
    );
    assert_eq!(status, 401, "{answer}");
    let (status, _) = raw_http(
        base,
        &format!(
            "GET /api/info?token={KEY}x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 401);
    // Let the last lines be written.
    thread::sleep(Duration::from_millis(200));
    let lines = logged_lines();
    assert!(
        lines
            .iter()
            .any(|line| line.contains("request refused") && line.contains("/api/generate")),
        "the refusal was not logged: {lines:#?}"
    );
    let leaked: Vec<_> = lines.iter().filter(|line| line.contains(KEY)).collect();
    assert!(leaked.is_empty(), "the key is in the logs: {leaked:#?}");
}

#[test]
fn unknown_models_are_not_found_and_client_errors_are_not_logged_as_errors() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::unknown_models_are_not_found_and_client_errors_are_not_logged_as_errors",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    let base = server();
    let marker = "no-such-model-7f3a";
    for path in ["/v1/chat/completions", "/v1/completions"] {
        let (status, answer) = keyed_post(
            base,
            path,
            &json!({
                "model": marker,
                "messages": [{"role": "user", "content": "Hi"}],
                "prompt": "Hi", "max_tokens": 2
            }),
        );
        assert_eq!(status, 404, "{answer}");
        assert_eq!(answer["error"]["code"], "model_not_found", "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(marker)),
            "{answer}"
        );
    }
    // The model's own name, or none, is served here.
    let models: Value = agent()
        .get(&format!("{base}/v1/models"))
        .set("Authorization", &format!("Bearer {KEY}"))
        .call()
        .expect("models")
        .into_json()
        .expect("JSON");
    let name = models["data"][0]["id"].clone();
    for model in [name.clone(), json!(""), Value::Null] {
        let (status, answer) = keyed_post(
            base,
            "/v1/completions",
            &json!({"model": model, "prompt": "Hi", "max_tokens": 2}),
        );
        assert_eq!(status, 200, "{model}: {answer}");
        assert_eq!(answer["model"], name);
    }
    let (status, _) = keyed_post(base, "/v1/completions", &json!({"prompt": 5}));
    assert_eq!(status, 400);
    thread::sleep(Duration::from_millis(200));
    let errors: Vec<_> = logged_lines()
        .into_iter()
        .filter(|line| line.contains("ERROR"))
        .collect();
    assert!(
        errors.is_empty(),
        "client errors logged as errors: {errors:#?}"
    );
}

#[test]
fn tuning_starts_only_when_confirmed() {
    if crate::alone::in_group_process("hostile::", "hostile::tuning_starts_only_when_confirmed") {
        return;
    }
    let _one_at_a_time = exclusive();
    let base = server();
    for body in [
        json!({}),
        json!({"confirm": false}),
        json!({"max_tokens": 16}),
    ] {
        let (status, answer) = keyed_post(base, "/api/tune", &body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "confirmation_required", "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("\"confirm\": true")),
            "{answer}"
        );
    }
    // Confirmed, it goes on to the next check: this model has no heads.
    let (status, answer) = keyed_post(base, "/api/tune", &json!({"confirm": true}));
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "no_medusa_heads");
}

#[test]
fn a_remote_engine_is_named_as_the_model() {
    if crate::alone::in_group_process(
        "hostile::",
        "hostile::a_remote_engine_is_named_as_the_model",
    ) {
        return;
    }
    let _one_at_a_time = exclusive();
    let base = server();
    let remote = start(|_| {});
    let (status, answer) = keyed_post(base, "/api/remotes", &json!({"name": "lab", "url": remote}));
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = keyed_post(
        base,
        "/v1/chat/completions",
        &json!({"model": "lab", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    );
    assert_eq!(status, 200, "{answer}");
    // The remote engine's model answered, named as it lists it.
    let remote_model = get_from(&remote, "/v1/models").1["data"][0]["id"].clone();
    assert_eq!(answer["model"], remote_model, "{answer}");
    let runs: Value = agent()
        .get(&format!("{base}/api/runs?engine=lab"))
        .set("Authorization", &format!("Bearer {KEY}"))
        .call()
        .expect("runs")
        .into_json()
        .expect("JSON");
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1), "{runs}");
    let request = agent()
        .delete(&format!("{base}/api/remotes/lab"))
        .set("Authorization", &format!("Bearer {KEY}"));
    assert_eq!(send(request, None).0, 204);
}
