//! fastpath-rt: run XDP objects in userspace. `fastpath rt …` calls it.

use std::time::Instant;

use fastpath_rt::elf::{map_type, BpfObject};
use fastpath_rt::interp::Exec;
use fastpath_rt::jit::Jit;
use fastpath_rt::vm::{Packet, Vm};
use fastpath_rt::{kernel, pcap};

const USAGE: &str = "usage:
  fastpath-rt test-run OBJ --in IN.pcap [--out OUT.pcap] [--prog NAME] [--repeat N]
                           [--engine interp|jit] [--json] [--dump-maps] [--maps-in FILE.json] [--no-verify]
  fastpath-rt run OBJ --dev IFACE [--prog NAME] [--engine interp|jit] [--generic] [--tap NAME]
                      [--duration SECONDS] [--json]
  fastpath-rt list OBJ
  fastpath-rt verify OBJ [--prog NAME]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("fastpath-rt: {e}");
        std::process::exit(1);
    }
}

struct Opts {
    obj: String,
    input: Option<String>,
    out: Option<String>,
    prog: Option<String>,
    repeat: u64,
    engine: String,
    json: bool,
    dump: bool,
    verify: bool,
    maps_in: Option<String>,
    dev: Option<String>,
    tap: Option<String>,
    generic: bool,
    duration: f64,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts { obj: String::new(), input: None, out: None, prog: None, repeat: 1, engine: "interp".into(), json: false, dump: false, verify: true, maps_in: None, dev: None, tap: None, generic: false, duration: 0.0 };
    let mut i = 0;
    let val = |i: &mut usize, name: &str| -> Result<String, String> {
        *i += 1;
        args.get(*i).cloned().ok_or_else(|| format!("{name} needs a value"))
    };
    while i < args.len() {
        match args[i].as_str() {
            "--in" => o.input = Some(val(&mut i, "--in")?),
            "--out" => o.out = Some(val(&mut i, "--out")?),
            "--prog" => o.prog = Some(val(&mut i, "--prog")?),
            "--engine" => o.engine = val(&mut i, "--engine")?,
            "--repeat" => {
                let v = val(&mut i, "--repeat")?;
                o.repeat = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| format!("--repeat {v:?}: a positive count"))?;
            }
            "--json" => o.json = true,
            "--dev" => o.dev = Some(val(&mut i, "--dev")?),
            "--tap" => o.tap = Some(val(&mut i, "--tap")?),
            "--generic" => o.generic = true,
            "--duration" => {
                let v = val(&mut i, "--duration")?;
                o.duration = v.parse().ok().filter(|&d: &f64| d > 0.0).ok_or_else(|| format!("--duration {v:?}: seconds, above 0"))?;
            }
            "--maps-in" => o.maps_in = Some(val(&mut i, "--maps-in")?),
            "--dump-maps" => o.dump = true,
            "--no-verify" => o.verify = false,
            a if a.starts_with('-') => return Err(format!("unknown flag {a}\n{USAGE}")),
            a if o.obj.is_empty() => o.obj = a.to_string(),
            a => return Err(format!("unexpected argument {a:?}\n{USAGE}")),
        }
        i += 1;
    }
    if o.obj.is_empty() {
        return Err(format!("no object file given\n{USAGE}"));
    }
    if o.engine != "interp" && o.engine != "jit" {
        return Err(format!("--engine {:?}: use interp or jit", o.engine));
    }
    Ok(o)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn run(args: &[String]) -> Result<(), String> {
    let Some(cmd) = args.first() else { return Err(USAGE.into()) };
    let o = parse(&args[1..])?;
    let obj = BpfObject::load(&o.obj)?;
    match cmd.as_str() {
        "list" => {
            for p in &obj.programs {
                println!("program {} (section {}, {} instructions)", p.name, p.section, p.insns.len());
            }
            for m in &obj.maps {
                println!("map {} {} key {} value {} max_entries {}", m.name, map_type::name(m.map_type), m.key_size, m.value_size, m.max_entries);
            }
            Ok(())
        }
        "verify" => {
            let p = obj.program(o.prog.as_deref())?;
            kernel::verify(&obj, p)?;
            println!("{}: accepted by the kernel's verifier", p.name);
            Ok(())
        }
        "test-run" => test_run(&obj, &o),
        "run" => run_xsk(&obj, &o),
        c => Err(format!("unknown command {c:?}\n{USAGE}")),
    }
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err(format!("hex {s:?} has an odd length"));
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("hex {s:?}: {e}"))).collect()
}

/// --maps-in: {"map": [["key hex", "value hex"], ...]}, written as
/// userspace writes maps (every CPU's value for per-CPU maps).
fn fill_maps(vm: &mut Vm, path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let obj = v.as_object().ok_or_else(|| format!("{path}: expected an object of map names"))?;
    for (name, entries) in obj {
        let idx = vm.map_index(name).ok_or_else(|| format!("{path}: the object has no map {name:?}"))?;
        for e in entries.as_array().ok_or_else(|| format!("{path}: {name}: expected a list of [key, value]"))? {
            let kv = e.as_array().filter(|a| a.len() == 2).ok_or_else(|| format!("{path}: {name}: an entry is not [key, value]"))?;
            let k = unhex(kv[0].as_str().unwrap_or(""))?;
            let val = unhex(kv[1].as_str().unwrap_or(""))?;
            let m = &mut vm.maps[idx];
            if k.len() != m.def.key_size as usize {
                return Err(format!("{path}: {name}: key of {} bytes, the map's are {}", k.len(), m.def.key_size));
            }
            let r = m.update(&k, &val, 0, None);
            if r != 0 {
                return Err(format!("{path}: {name}: update failed with error {}", -r));
            }
        }
    }
    Ok(())
}

fn test_run(obj: &BpfObject, o: &Opts) -> Result<(), String> {
    let input = o.input.as_ref().ok_or("test-run needs --in IN.pcap")?;
    let pkts = pcap::read(input)?;
    let def = obj.program(o.prog.as_deref())?;
    if o.verify {
        kernel::verify(obj, def)?;
    }
    let mut vm = Vm::new(obj, 1)?;
    if let Some(path) = &o.maps_in {
        fill_maps(&mut vm, path)?;
    }
    let prog = vm.program_index(&def.name)?;
    let jit = if o.engine == "jit" { Some(Jit::compile(&vm, prog)?) } else { None };
    let mut results = Vec::new();
    let mut outs = Vec::new();
    let (mut total_ns, mut total_steps, mut runs) = (0u128, 0u64, 0u64);
    for (n, frame) in pkts.iter().enumerate() {
        let mut pkt = Packet::new(frame, 1, 0).map_err(|e| format!("packet {}: {e}", n + 1))?;
        let mut ret = 0;
        let start = Instant::now();
        let mut steps = 0;
        match &jit {
            Some(j) => {
                for _ in 0..o.repeat {
                    ret = j.run(&mut vm, prog, &mut pkt).map_err(|e| format!("packet {}: {e}", n + 1))?;
                }
            }
            None => {
                for _ in 0..o.repeat {
                    let mut x = Exec::new(&mut vm, &mut pkt);
                    ret = x.run(prog).map_err(|e| format!("packet {}: {e}", n + 1))?;
                    steps += x.steps;
                }
            }
        }
        total_ns += start.elapsed().as_nanos();
        total_steps += steps;
        runs += o.repeat;
        let mut rb = Vec::new();
        for m in vm.maps.iter_mut() {
            let name = m.def.name.clone();
            if let Some(r) = m.ringbuf() {
                for rec in r.drain() {
                    rb.push(format!("{{\"map\":\"{name}\",\"data\":\"{}\"}}", hex(&rec)));
                }
            }
        }
        let out = pkt.output();
        results.push(format!("{{\"ret\":{ret},\"out\":\"{}\",\"ringbuf\":[{}]}}", hex(&out), rb.join(",")));
        outs.push(out);
    }
    if let Some(path) = &o.out {
        pcap::write(path, &outs)?;
    }
    let ns = if runs > 0 { total_ns as f64 / runs as f64 } else { 0.0 };
    let insns = if runs > 0 { total_steps as f64 / runs as f64 } else { 0.0 };
    let per_insn = if total_steps > 0 { total_ns as f64 / total_steps as f64 } else { 0.0 };
    if o.json {
        let mut maps = Vec::new();
        if o.dump {
            for m in &vm.maps {
                if m.def.map_type == map_type::RINGBUF {
                    continue;
                }
                let es: Vec<String> = m.entries().iter().map(|(k, v)| format!("[\"{}\",\"{}\"]", hex(k), hex(v))).collect();
                maps.push(format!("\"{}\":{{\"type\":\"{}\",\"percpu\":{},\"entries\":[{}]}}", m.def.name, map_type::name(m.def.map_type), m.percpu(), es.join(",")));
            }
        }
        println!(
            "{{\"program\":\"{}\",\"engine\":\"{}\",\"runs\":{runs},\"ns_per_run\":{ns:.1},\"insns_per_run\":{insns:.1},\"ns_per_insn\":{per_insn:.2},\"packets\":[{}],\"maps\":{{{}}}}}",
            def.name,
            o.engine,
            results.join(","),
            maps.join(",")
        );
    } else {
        println!("{}: {} packets, {runs} runs, {ns:.1} ns per run, {insns:.1} instructions per run, {per_insn:.2} ns per instruction ({})", def.name, pkts.len(), o.engine);
    }
    Ok(())
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Runs the program on an interface's queue 0 over AF_XDP until the
/// duration passes or a signal comes. TX goes back out of the interface,
/// PASS to the TAP device if one is named (else it is dropped and counted),
/// DROP and ABORTED recycle the frame; REDIRECT needs a second port, which
/// this loop does not have yet: counted and dropped.
fn run_xsk(obj: &BpfObject, o: &Opts) -> Result<(), String> {
    use fastpath_rt::xsk::{Desc, Redirector, Socket, Tap, FRAME};
    let dev = o.dev.as_ref().ok_or("run needs --dev IFACE")?;
    let cname = std::ffi::CString::new(dev.as_str()).map_err(|_| "bad interface name")?;
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(format!("interface {dev} not found in this network namespace"));
    }
    let def = obj.program(o.prog.as_deref())?;
    if o.verify {
        kernel::verify(obj, def)?;
    }
    let mut vm = Vm::new(obj, 1)?;
    if let Some(path) = &o.maps_in {
        fill_maps(&mut vm, path)?;
    }
    let prog = vm.program_index(&def.name)?;
    let jit = if o.engine == "jit" { Some(Jit::compile(&vm, prog)?) } else { None };
    let tap = match &o.tap {
        Some(n) => Some(Tap::open(n)?),
        None => None,
    };
    let sock = Socket::open(ifindex, 0, 4096);
    let mut sock = sock.map_err(|e| format!("{e}: does {dev} support AF_XDP?"))?;
    let redir = Redirector::attach(ifindex, 1, o.generic)?;
    redir.bind(0, &sock)?;
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    eprintln!("fastpath-rt: {} on {dev} queue 0, {} mode, {} ({})", def.name, if sock.zero_copy { "zero-copy" } else { "copy" }, o.engine, if o.generic { "generic XDP" } else { "native XDP" });
    let mut counts = [0u64; 5];
    let (mut faults, mut pass_dropped, mut tx_full) = (0u64, 0u64, 0u64);
    let mut pkt = Packet::new(&[], ifindex, 0)?;
    let mut rx = Vec::with_capacity(64);
    let mut tx: Vec<Desc> = Vec::with_capacity(64);
    let start = Instant::now();
    let (mut first, mut last) = (None, start);
    while !STOP.load(std::sync::atomic::Ordering::Relaxed) && (o.duration == 0.0 || start.elapsed().as_secs_f64() < o.duration) {
        rx.clear();
        sock.recv(64, &mut rx);
        if rx.is_empty() {
            sock.wait(1);
            continue;
        }
        tx.clear();
        last = Instant::now();
        first.get_or_insert(last);
        for d in &rx {
            let frame = sock.frame(d.addr & !(FRAME as u64 - 1));
            let off = (d.addr as usize) & (FRAME - 1);
            if pkt.load(&frame[off..off + d.len as usize]).is_err() {
                faults += 1;
                sock.recycle(d.addr);
                continue;
            }
            let r = match &jit {
                Some(j) => j.run(&mut vm, prog, &mut pkt),
                None => Exec::new(&mut vm, &mut pkt).run(prog),
            };
            let ret = match r {
                Ok(v) => v,
                Err(_) => {
                    faults += 1;
                    0
                }
            };
            counts[(ret as usize).min(4)] += 1;
            match ret as u32 {
                3 => {
                    let out = pkt.output();
                    let base = d.addr & !(FRAME as u64 - 1);
                    sock.frame(base)[..out.len()].copy_from_slice(&out);
                    tx.push(Desc { addr: base, len: out.len() as u32, options: 0 });
                }
                2 => {
                    let delivered = tap.as_ref().map(|t| t.write(&pkt.output())).unwrap_or(false);
                    if !delivered {
                        pass_dropped += 1;
                    }
                    sock.recycle(d.addr);
                }
                _ => sock.recycle(d.addr),
            }
        }
        let sent = sock.send(&tx);
        tx_full += (tx.len() - sent) as u64;
    }
    // Rates over the time traffic came, not the time waited for it.
    let secs = first.map(|f| last.duration_since(f).as_secs_f64()).unwrap_or(0.0);
    let total: u64 = counts.iter().sum();
    drop(redir);
    let summary = format!(
        "{{\"program\":\"{}\",\"engine\":\"{}\",\"seconds\":{secs:.3},\"packets\":{total},\"pps\":{:.0},\"aborted\":{},\"drop\":{},\"pass\":{},\"tx\":{},\"redirect\":{},\"faults\":{faults},\"pass_without_tap\":{pass_dropped},\"tx_ring_full\":{tx_full}}}",
        def.name, o.engine, total as f64 / secs.max(1e-9), counts[0], counts[1], counts[2], counts[3], counts[4]
    );
    if o.json {
        println!("{summary}");
    } else {
        println!("{}: {total} packets in {secs:.1} s ({:.0} pps): aborted {}, drop {}, pass {} ({pass_dropped} without a TAP), tx {}, redirect {} (not sent: one port), faults {faults}", def.name, total as f64 / secs.max(1e-9), counts[0], counts[1], counts[2], counts[3], counts[4]);
    }
    Ok(())
}
