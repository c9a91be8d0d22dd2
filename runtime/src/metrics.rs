//! Prometheus metrics of `run` and `forward` (--metrics ADDR): what each
//! port (a device's queue) counted, read at scrape time, served by a small
//! HTTP/1.1 server on a thread of its own.
//!
//! The packet path does not wait on the scraper: each queue's thread counts
//! in its own plain counters and publishes them with relaxed stores into
//! its ports' [`PortStats`] once per pass over its rings (a pass takes up to
//! 64 frames per port), which the scraper reads with relaxed loads. No lock
//! is taken on the packet path; the one lock, around a socket's descriptor,
//! is taken by the scraper to read the kernel's statistics of the socket
//! and by the queue's thread once, before the socket closes.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// XDP verdicts by return code: 0 aborted … 4 redirect.
pub const VERDICTS: [&str; 5] = ["aborted", "drop", "pass", "tx", "redirect"];

/// Errors the runtime counts itself.
pub const PROGRAM_FAULT: usize = 0;
pub const PASS_WITHOUT_TAP: usize = 1;
pub const REDIRECT_NO_PORT: usize = 2;
pub const TX_RING_FULL: usize = 3;
pub const RUNTIME_ERRORS: [&str; 4] = ["program_fault", "pass_without_tap", "redirect_no_port", "tx_ring_full"];

/// The kernel's counters of an AF_XDP socket (XDP_STATISTICS), in the
/// order of struct xdp_statistics; tx_ring_empty_descs (TX woken with
/// nothing to send) is no error and not exported.
pub const SOCKET_ERRORS: [&str; 5] = ["rx_dropped", "rx_invalid_descs", "tx_invalid_descs", "rx_ring_full", "fill_ring_empty"];

/// What the build of the runtime says of itself (build.rs).
pub const VERSION: &str = env!("FASTPATH_RT_VERSION");
pub const COMMIT: &str = env!("FASTPATH_RT_COMMIT");
pub const RUSTVERSION: &str = env!("FASTPATH_RT_RUSTVERSION");

/// One port's counters: a device's queue, served by that queue's thread,
/// which alone writes them. Aligned so that two ports' counters never share
/// a cache line.
#[repr(align(64))]
pub struct PortStats {
    pub device: String,
    pub queue: u32,
    packets: [AtomicU64; 5],
    bytes: [AtomicU64; 5],
    errors: [AtomicU64; 4],
    zero_copy: AtomicBool,
    /// The socket to read XDP_STATISTICS from, -1 when there is none (yet,
    /// or any more).
    sock: Mutex<i32>,
}

/// A queue thread's own counts for one port; [`PortCounts::publish`] makes
/// them visible to the scraper.
#[derive(Default, Clone, Copy)]
pub struct PortCounts {
    pub packets: [u64; 5],
    pub bytes: [u64; 5],
    pub errors: [u64; 4],
}

impl PortCounts {
    /// One frame the program gave `verdict` to (0–4), `len` bytes as it
    /// arrived.
    #[inline]
    pub fn verdict(&mut self, verdict: usize, len: u32) {
        self.packets[verdict] += 1;
        self.bytes[verdict] += len as u64;
    }

    /// Plain stores: this thread is the only writer.
    pub fn publish(&self, to: &PortStats) {
        for i in 0..5 {
            to.packets[i].store(self.packets[i], Relaxed);
            to.bytes[i].store(self.bytes[i], Relaxed);
        }
        for i in 0..RUNTIME_ERRORS.len() {
            to.errors[i].store(self.errors[i], Relaxed);
        }
    }
}

impl PortStats {
    fn new(device: &str, queue: u32) -> PortStats {
        PortStats { device: device.to_string(), queue, packets: Default::default(), bytes: Default::default(), errors: Default::default(), zero_copy: AtomicBool::new(false), sock: Mutex::new(-1) }
    }

    /// The socket is bound: its kernel counters can be read.
    pub fn set_socket(&self, fd: i32, zero_copy: bool) {
        *self.sock.lock().unwrap_or_else(|e| e.into_inner()) = fd;
        self.zero_copy.store(zero_copy, Relaxed);
    }

    /// Before the socket closes: no scrape reads its descriptor after this.
    pub fn clear_socket(&self) {
        *self.sock.lock().unwrap_or_else(|e| e.into_inner()) = -1;
    }

    pub fn counts(&self) -> PortCounts {
        let mut c = PortCounts::default();
        for i in 0..5 {
            c.packets[i] = self.packets[i].load(Relaxed);
            c.bytes[i] = self.bytes[i].load(Relaxed);
        }
        for i in 0..RUNTIME_ERRORS.len() {
            c.errors[i] = self.errors[i].load(Relaxed);
        }
        c
    }

    /// The kernel's counters of the socket, zero without one.
    fn socket_errors(&self) -> [u64; 5] {
        let fd = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        if *fd < 0 {
            return [0; 5];
        }
        const SOL_XDP: i32 = 283;
        const XDP_STATISTICS: i32 = 7;
        // rx_dropped, rx_invalid_descs, tx_invalid_descs, rx_ring_full,
        // rx_fill_ring_empty_descs, tx_ring_empty_descs (older kernels fill
        // the first three).
        let mut s = [0u64; 6];
        let mut len = std::mem::size_of_val(&s) as u32;
        let r = unsafe { libc::getsockopt(*fd, SOL_XDP, XDP_STATISTICS, s.as_mut_ptr() as *mut libc::c_void, &mut len) };
        if r < 0 {
            return [0; 5];
        }
        [s[0], s[1], s[2], s[3], s[4]]
    }
}

/// A device of the runtime, and whether its redirect program is attached.
pub struct Device {
    pub name: String,
    pub mode: &'static str,
    attached: AtomicBool,
}

/// Everything a scrape reports.
pub struct Metrics {
    pub ports: Vec<PortStats>,
    pub devices: Vec<Device>,
    start_time: f64,
}

impl Metrics {
    /// Ports for every queue of every device, queue by queue.
    pub fn new(devices: &[String], queues: u32, generic: bool) -> Metrics {
        let mut ports = Vec::new();
        for q in 0..queues {
            for d in devices {
                ports.push(PortStats::new(d, q));
            }
        }
        let mode = if generic { "generic" } else { "native" };
        Metrics { ports, devices: devices.iter().map(|d| Device { name: d.clone(), mode, attached: AtomicBool::new(false) }).collect(), start_time: process_start_time() }
    }

    pub fn port(&self, device: &str, queue: u32) -> Option<&PortStats> {
        self.ports.iter().find(|p| p.device == device && p.queue == queue)
    }

    pub fn set_attached(&self, device: &str, attached: bool) {
        for d in self.devices.iter().filter(|d| d.name == device) {
            d.attached.store(attached, Relaxed);
        }
    }

    /// The exposition, Prometheus text format 0.0.4.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(4096 + self.ports.len() * 1024);
        family(&mut o, "fastpath_build_info", "gauge", "Always 1; the labels say which fastpath build serves these metrics and for which function.");
        let _ = writeln!(o, "fastpath_build_info{{version=\"{}\",commit=\"{}\",function=\"rt\",rustversion=\"{}\"}} 1", esc(VERSION), esc(COMMIT), esc(RUSTVERSION));
        family(&mut o, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
        let _ = writeln!(o, "process_start_time_seconds {}", float(self.start_time));
        family(&mut o, "fastpath_rt_device_attached", "gauge", "1 while the runtime's AF_XDP redirect program is attached to the device in this XDP mode (generic is the slow path).");
        for d in &self.devices {
            let _ = writeln!(o, "fastpath_rt_device_attached{{device=\"{}\",mode=\"{}\"}} {}", esc(&d.name), d.mode, d.attached.load(Relaxed) as u8);
        }
        family(&mut o, "fastpath_rt_socket_zero_copy", "gauge", "1 when the port's AF_XDP socket is bound in zero-copy mode, 0 in copy mode or before it is bound.");
        for p in &self.ports {
            let _ = writeln!(o, "fastpath_rt_socket_zero_copy{{device=\"{}\",queue=\"{}\"}} {}", esc(&p.device), p.queue, p.zero_copy.load(Relaxed) as u8);
        }
        let counts: Vec<PortCounts> = self.ports.iter().map(|p| p.counts()).collect();
        family(&mut o, "fastpath_rt_packets_total", "counter", "Frames the runtime received on a device's queue, by the program's verdict (redirect for every frame of forward, which runs no program).");
        for (p, c) in self.ports.iter().zip(&counts) {
            for (v, name) in VERDICTS.iter().enumerate() {
                let _ = writeln!(o, "fastpath_rt_packets_total{{device=\"{}\",queue=\"{}\",verdict=\"{name}\"}} {}", esc(&p.device), p.queue, c.packets[v]);
            }
        }
        family(&mut o, "fastpath_rt_bytes_total", "counter", "Bytes of the frames the runtime received on a device's queue (as they arrived), by the program's verdict.");
        for (p, c) in self.ports.iter().zip(&counts) {
            for (v, name) in VERDICTS.iter().enumerate() {
                let _ = writeln!(o, "fastpath_rt_bytes_total{{device=\"{}\",queue=\"{}\",verdict=\"{name}\"}} {}", esc(&p.device), p.queue, c.bytes[v]);
            }
        }
        family(
            &mut o,
            "fastpath_rt_errors_total",
            "counter",
            "Frames lost or faults, by device and kind: the runtime's own (program_fault, pass_without_tap, redirect_no_port, tx_ring_full) and the kernel's AF_XDP socket statistics (rx_dropped, rx_invalid_descs, tx_invalid_descs, rx_ring_full, fill_ring_empty).",
        );
        for d in &self.devices {
            let mut own = [0u64; 4];
            let mut kernel = [0u64; 5];
            for (p, c) in self.ports.iter().zip(&counts).filter(|(p, _)| p.device == d.name) {
                for (a, b) in own.iter_mut().zip(c.errors) {
                    *a += b;
                }
                for (a, b) in kernel.iter_mut().zip(p.socket_errors()) {
                    *a += b;
                }
            }
            for (k, v) in RUNTIME_ERRORS.iter().zip(own).chain(SOCKET_ERRORS.iter().zip(kernel)) {
                let _ = writeln!(o, "fastpath_rt_errors_total{{device=\"{}\",kind=\"{k}\"}} {v}", esc(&d.name));
            }
        }
        o
    }
}

fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {}", help.replace('\\', "\\\\").replace('\n', "\\n"));
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

/// A label value as the text format escapes it.
pub fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn float(v: f64) -> String {
    // Go's strconv 'g' would write 1.7e+09; Prometheus parses either, and
    // a plain decimal reads better.
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// When the process started, in seconds since the epoch: from its start
/// in clock ticks after boot (/proc/self/stat) and the boot time
/// (/proc/stat), as Prometheus' process collector computes it; now, if
/// those cannot be read.
pub fn process_start_time() -> f64 {
    let from_proc = || -> Option<f64> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name may hold spaces and parentheses: fields count
        // from after its last ')'. starttime is field 22, the 20th after it.
        let rest = &stat[stat.rfind(')')? + 1..];
        let ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
        let btime: f64 = std::fs::read_to_string("/proc/stat").ok()?.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())?;
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (hz > 0).then(|| btime + ticks / hz as f64)
    };
    from_proc().unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0))
}

/// Listens on ADDR (HOST:PORT; `:PORT` is every address), or says why it
/// cannot: a runtime started with a taken or bad address fails at once
/// rather than run unwatched.
pub fn listen(addr: &str) -> Result<TcpListener, String> {
    let hint = "give HOST:PORT, such as 127.0.0.1:30493 (127.0.0.1:0 picks a free port)";
    let addrs: Vec<SocketAddr> = if let Some(port) = addr.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| format!("--metrics {addr:?}: not a port; {hint}"))?;
        // Both families where the host has IPv6, IPv4 alone where not.
        vec![SocketAddr::from(([0u16; 8], port)), SocketAddr::from(([0u8; 4], port))]
    } else {
        addr.to_socket_addrs().map_err(|e| format!("--metrics {addr:?}: {e}; {hint}"))?.collect()
    };
    let mut last = None;
    for a in &addrs {
        match TcpListener::bind(a) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) if e.kind() == std::io::ErrorKind::AddrInUse => format!("--metrics {addr}: {e} (another process listens there: give a free address, such as 127.0.0.1:0)"),
        Some(e) => format!("--metrics {addr}: {e}; {hint}"),
        None => format!("--metrics {addr:?}: no address; {hint}"),
    })
}

/// Longest request head read; a longer one is answered 431.
pub const MAX_REQUEST: usize = 8192;
/// How long one client may take to send its request, and to take the
/// answer: the one thread serves the next client after that at the latest.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves /metrics and /healthz on the listener from a thread of its own,
/// one client at a time, for as long as the process runs.
pub fn serve(listener: TcpListener, m: Arc<Metrics>) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(s) => handle(s, &m),
                    // Out of descriptors, or a client gone before accept:
                    // never a reason to stop serving.
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        })
        .expect("start the metrics thread")
}

/// One client: its request, read within CLIENT_TIMEOUT and MAX_REQUEST
/// bytes, and one answer; then the connection closes.
fn handle(mut s: TcpStream, m: &Metrics) {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let _ = s.set_write_timeout(Some(CLIENT_TIMEOUT));
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let head = loop {
        if let Some(end) = head_end(&buf) {
            break Some(end);
        }
        if buf.len() >= MAX_REQUEST {
            break None;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            return; // too slow: closed without an answer
        }
        match s.read(&mut chunk) {
            Ok(0) => {
                if buf.is_empty() {
                    return;
                }
                break Some(buf.len()); // ended early: answered 400 below
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
    };
    let answer = match head {
        None => response(431, "Request Header Fields Too Large", "text/plain; charset=utf-8", b"request too large\n", true, &[]),
        Some(end) => respond(&buf[..end], || m.render()),
    };
    let _ = s.write_all(&answer);
    let _ = s.flush();
    let _ = s.shutdown(std::net::Shutdown::Write);
    // Take what the client sent past the head (a bounded amount, for a
    // short while), so that the close does not reset the connection
    // before the client has read the answer.
    let until = Instant::now() + Duration::from_millis(200);
    let mut drained = 0;
    while drained < 1 << 16 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

/// Where the request head ends (after its blank line), if it has.
fn head_end(b: &[u8]) -> Option<usize> {
    if let Some(i) = b.windows(4).position(|w| w == b"\r\n\r\n") {
        return Some(i + 4);
    }
    b.windows(2).position(|w| w == b"\n\n").map(|i| i + 2)
}

/// The answer to one request head: 200 with the exposition for GET (or
/// HEAD) /metrics, "ok" for /healthz, 404 for any other path, 405 for any
/// other method, 400 for what is not an HTTP/1 request.
pub fn respond(head: &[u8], render: impl FnOnce() -> String) -> Vec<u8> {
    let bad = || response(400, "Bad Request", "text/plain; charset=utf-8", b"bad request\n", true, &[]);
    let Ok(text) = std::str::from_utf8(head) else { return bad() };
    if !text.ends_with("\n\n") && !text.ends_with("\r\n\r\n") {
        return bad();
    }
    let line = text.lines().next().unwrap_or("");
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else { return bad() };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') || method.is_empty() || !method.bytes().all(|c| c.is_ascii_uppercase()) {
        return bad();
    }
    let path = target.split('?').next().unwrap_or(target);
    let body = method != "HEAD";
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render().as_bytes(), body, &[]),
        ("GET" | "HEAD", "/healthz") => response(200, "OK", "text/plain; charset=utf-8", b"ok\n", body, &[]),
        ("GET" | "HEAD", _) => response(404, "Not Found", "text/plain; charset=utf-8", b"not found: /metrics and /healthz are served\n", body, &[]),
        _ => response(405, "Method Not Allowed", "text/plain; charset=utf-8", b"method not allowed\n", true, &["Allow: GET, HEAD"]),
    }
}

fn response(code: u16, reason: &str, ctype: &str, body: &[u8], with_body: bool, extra: &[&str]) -> Vec<u8> {
    let mut h = format!("HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for e in extra {
        h.push_str(e);
        h.push_str("\r\n");
    }
    h.push_str("\r\n");
    let mut out = h.into_bytes();
    if with_body {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metrics {
        let m = Metrics::new(&["veth0".into(), "we\"ird\\dev".into()], 2, false);
        let mut c = PortCounts::default();
        c.verdict(3, 60);
        c.verdict(3, 100);
        c.verdict(1, 64);
        c.errors[TX_RING_FULL] = 2;
        c.publish(m.port("veth0", 1).unwrap());
        m.set_attached("veth0", true);
        m
    }

    fn value<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
    }

    #[test]
    fn exposition() {
        let text = sample().render();
        assert_eq!(value(&text, r#"fastpath_rt_packets_total{device="veth0",queue="1",verdict="tx"}"#), Some("2"), "{text}");
        assert_eq!(value(&text, r#"fastpath_rt_packets_total{device="veth0",queue="1",verdict="drop"}"#), Some("1"));
        assert_eq!(value(&text, r#"fastpath_rt_packets_total{device="veth0",queue="0",verdict="tx"}"#), Some("0"));
        assert_eq!(value(&text, r#"fastpath_rt_bytes_total{device="veth0",queue="1",verdict="tx"}"#), Some("160"));
        assert_eq!(value(&text, r#"fastpath_rt_errors_total{device="veth0",kind="tx_ring_full"}"#), Some("2"));
        assert_eq!(value(&text, r#"fastpath_rt_errors_total{device="veth0",kind="fill_ring_empty"}"#), Some("0"));
        assert_eq!(value(&text, r#"fastpath_rt_device_attached{device="veth0",mode="native"}"#), Some("1"));
        assert_eq!(value(&text, r#"fastpath_rt_device_attached{device="we\"ird\\dev",mode="native"}"#), Some("0"));
        assert!(text.contains(r#"function="rt""#));
        let start: f64 = value(&text, "process_start_time_seconds").unwrap().parse().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(start > 1e9 && start <= now + 1.0, "start {start}, now {now}");
        // Every family is announced once, before its samples, and every
        // sample belongs to the family announced last.
        let mut current = String::new();
        let mut seen = std::collections::HashSet::new();
        for l in text.lines() {
            if let Some(r) = l.strip_prefix("# TYPE ") {
                current = r.split(' ').next().unwrap().to_string();
                assert!(seen.insert(current.clone()), "{current} twice");
            } else if !l.starts_with("# HELP ") {
                let name = l.split(['{', ' ']).next().unwrap();
                assert_eq!(name, current, "{l}");
            }
        }
        assert!(text.ends_with('\n'));
    }

    fn ask(head: &[u8]) -> String {
        String::from_utf8(respond(head, || "fastpath_x 1\n".into())).unwrap()
    }

    #[test]
    fn requests() {
        let ok = ask(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.contains("version=0.0.4") && ok.ends_with("\r\n\r\nfastpath_x 1\n"), "{ok}");
        assert!(ask(b"GET /metrics?x=1 HTTP/1.0\n\n").starts_with("HTTP/1.1 200"));
        assert!(ask(b"GET /healthz HTTP/1.1\r\n\r\n").ends_with("\r\n\r\nok\n"));
        let head = ask(b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n") && head.contains("Content-Length: 13\r\n"), "{head}");
        assert!(ask(b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(ask(b"GET /metricsx HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(ask(b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        for garbage in [&b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"[..], b"GET\r\n\r\n", b"GET /metrics\r\n\r\n", b"GET /metrics SPDY/3\r\n\r\n", b"GET  /metrics HTTP/1.1\r\n\r\n", b"get /metrics HTTP/1.1\r\n\r\n", b"GET metrics HTTP/1.1\r\n\r\n", b"GET /metrics HTTP/1.1\r\n", b"", b"\r\n\r\n"] {
            assert!(ask(garbage).starts_with("HTTP/1.1 400"), "{:?}: {}", String::from_utf8_lossy(garbage), ask(garbage));
        }
    }

    fn server() -> SocketAddr {
        let l = listen("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        serve(l, Arc::new(sample()));
        a
    }

    fn exchange(a: SocketAddr, send: &[u8]) -> String {
        let mut s = TcpStream::connect(a).unwrap();
        s.set_read_timeout(Some(CLIENT_TIMEOUT * 4)).unwrap();
        let _ = s.write_all(send);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn server_answers_and_survives_garbage() {
        let a = server();
        assert!(exchange(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").contains("fastpath_rt_packets_total{"));
        // Too long a head: 431, and the server goes on.
        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_REQUEST * 4, b'a');
        assert!(exchange(a, &long).starts_with("HTTP/1.1 431"));
        // Binary garbage, then the client closes its side: 400.
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(&[0u8, 255, 13, 10, 13, 10, 1, 2]).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(b"GET /met").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
        // A client that connects and says nothing, and one that never
        // finishes its request: the next is answered once they time out.
        let _silent = TcpStream::connect(a).unwrap();
        let mut slow = TcpStream::connect(a).unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        let t = Instant::now();
        assert!(exchange(a, b"GET /healthz HTTP/1.1\r\n\r\n").ends_with("ok\n"));
        assert!(t.elapsed() < CLIENT_TIMEOUT * 3, "{:?}", t.elapsed());
        assert!(exchange(a, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn listen_refuses() {
        let l = listen("127.0.0.1:0").unwrap();
        let taken = l.local_addr().unwrap().to_string();
        let e = listen(&taken).unwrap_err();
        assert!(e.contains(&taken) && e.contains("another process listens there"), "{e}");
        for bad in ["nonsense", "127.0.0.1", ":99999", "127.0.0.1:x", ""] {
            let e = listen(bad).unwrap_err();
            assert!(e.starts_with("--metrics"), "{bad}: {e}");
        }
    }
}
