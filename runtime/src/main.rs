//! fastpath-rt: run XDP objects in userspace. `fastpath rt …` calls it.

use std::time::Instant;

use fastpath_rt::elf::{map_type, BpfObject};
use fastpath_rt::interp::Exec;
use fastpath_rt::jit::Jit;
use fastpath_rt::vm::{Packet, Vm};
use fastpath_rt::mapsfile::fill_maps;
use fastpath_rt::{kernel, pcap, profile};

const USAGE: &str = "usage:
  fastpath-rt compile OBJ [-o OBJ.native] [--no-verify] [--opt none|all|typed-values,inline-helpers,const-maps]
                      [--const-map NAME…] [--maps-in FILE.json]
                      (every program compiled ahead of time; run and test-run take OBJ.native in place
                      of OBJ, with --engine aot, and check it was compiled from that ELF: --elf PATH;
                      --const-map: an array the programs only read, its contents (from --maps-in) compiled
                      in: a run refuses the object when the map then holds anything else)
  fastpath-rt test-run OBJ --in IN.pcap [--out OUT.pcap] [--prog NAME] [--repeat N]
                           [--engine interp|jit] [--json] [--dump-maps] [--maps-in FILE.json] [--no-verify]
  fastpath-rt run OBJ --dev IFACE [--dev IFACE…] [--prog NAME] [--engine interp|jit] [--generic] [--tap NAME]
                      [--duration SECONDS] [--json] [--maps-in FILE.json] [--maps-out FILE.json]
                      [--queues N] [--busy-poll] [--metrics ADDR] [--profile-stages] [I/O knobs]
                      (SIGUSR1 writes the maps to --maps-out while running; SIGINT/SIGTERM stop)
  fastpath-rt forward --dev IFACE --dev IFACE… [--queues N] [--busy-poll] [--generic] [--duration S] [--json]
                      [--metrics ADDR] [--profile-stages] [I/O knobs]
                      (no program: each frame goes out of the next --dev, the runtime's I/O alone)
  fastpath-rt list OBJ
  fastpath-rt verify OBJ [--prog NAME]
  --kernel X.Y (any command) behaves as kernel X.Y's helpers, not the running kernel's
  --profile-stages (run, forward) times each stage of the I/O loop and prints, at exit, ns per frame per
                      stage (in --json's \"profile\")
  I/O knobs (run, forward): --batch N (frames taken from an RX ring per pass, 64), --need-wakeup (bind with
                      XDP_USE_NEED_WAKEUP; when idle, spin unless the kernel asks to be woken), --kick drain|once|needed
                      (sendto until the TX ring is empty (drain, the default), once a batch, or when the kernel asks),
                      --fill N (frames given to a fill ring per pass, all it has room for by default)
  --metrics ADDR (run, forward) serves Prometheus metrics at http://ADDR/metrics (HOST:PORT; :PORT for
                      every address)";

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
    devs: Vec<String>,
    maps_out: Option<String>,
    queues: u32,
    busy_poll: bool,
    tap: Option<String>,
    generic: bool,
    duration: f64,
    kernel: Option<(u32, u32)>,
    engine_given: bool,
    output: Option<String>,
    elf: Option<String>,
    /// --metrics: where to serve Prometheus metrics (run, forward).
    metrics: Option<String>,
    /// An AOT object, when OBJ is one.
    native: Option<fastpath_rt::aot::Native>,
    /// compile: --opt, and the maps --const-map names.
    opt: Option<String>,
    const_maps: Vec<String>,
    /// --profile-stages: time the stages of the AF_XDP loop.
    profile: bool,
    /// The I/O knobs: frames per RX batch, need_wakeup, the TX kick, the
    /// fill ring's refill per pass.
    batch: u32,
    need_wakeup: bool,
    kick: fastpath_rt::xsk::Kick,
    fill: usize,
}

fn parse(args: &[String], forward: bool) -> Result<Opts, String> {
    let mut o = Opts { obj: String::new(), input: None, out: None, prog: None, repeat: 1, engine: "interp".into(), json: false, dump: false, verify: true, maps_in: None, devs: Vec::new(), maps_out: None, queues: 1, busy_poll: false, tap: None, generic: false, duration: 0.0, kernel: None, engine_given: false, output: None, elf: None, metrics: None, native: None, opt: None, const_maps: Vec::new(), profile: false, batch: 64, need_wakeup: false, kick: fastpath_rt::xsk::Kick::Drain, fill: fastpath_rt::xsk::RING as usize };
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
            "--engine" => {
                o.engine = val(&mut i, "--engine")?;
                o.engine_given = true;
            }
            "-o" => o.output = Some(val(&mut i, "-o")?),
            "--elf" => o.elf = Some(val(&mut i, "--elf")?),
            "--opt" => o.opt = Some(val(&mut i, "--opt")?),
            "--const-map" => o.const_maps.push(val(&mut i, "--const-map")?),
            "--repeat" => {
                let v = val(&mut i, "--repeat")?;
                o.repeat = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| format!("--repeat {v:?}: a positive count"))?;
            }
            "--json" => o.json = true,
            "--dev" => o.devs.push(val(&mut i, "--dev")?),
            "--tap" => o.tap = Some(val(&mut i, "--tap")?),
            "--maps-out" => o.maps_out = Some(val(&mut i, "--maps-out")?),
            "--busy-poll" => o.busy_poll = true,
            "--profile-stages" => o.profile = true,
            "--need-wakeup" => o.need_wakeup = true,
            "--batch" => {
                let v = val(&mut i, "--batch")?;
                o.batch = v.parse().ok().filter(|&n: &u32| (1..=fastpath_rt::xsk::RING).contains(&n)).ok_or_else(|| format!("--batch {v:?}: 1 to {}", fastpath_rt::xsk::RING))?;
            }
            "--fill" => {
                let v = val(&mut i, "--fill")?;
                o.fill = v.parse().ok().filter(|&n: &usize| (1..=fastpath_rt::xsk::RING as usize).contains(&n)).ok_or_else(|| format!("--fill {v:?}: 1 to {}", fastpath_rt::xsk::RING))?;
            }
            "--kick" => {
                let v = val(&mut i, "--kick")?;
                o.kick = fastpath_rt::xsk::Kick::parse(&v).ok_or_else(|| format!("--kick {v:?}: drain, once or needed"))?;
            }
            "--queues" => {
                let v = val(&mut i, "--queues")?;
                o.queues = v.parse().ok().filter(|&n: &u32| (1..=64).contains(&n)).ok_or_else(|| format!("--queues {v:?}: 1 to 64"))?;
            }
            "--generic" => o.generic = true,
            "--duration" => {
                let v = val(&mut i, "--duration")?;
                o.duration = v.parse().ok().filter(|&d: &f64| d > 0.0).ok_or_else(|| format!("--duration {v:?}: seconds, above 0"))?;
            }
            "--maps-in" => o.maps_in = Some(val(&mut i, "--maps-in")?),
            "--metrics" => o.metrics = Some(val(&mut i, "--metrics")?),
            "--dump-maps" => o.dump = true,
            "--no-verify" => o.verify = false,
            "--kernel" => {
                let v = val(&mut i, "--kernel")?;
                o.kernel = Some(fastpath_rt::kernel::parse_version(&v).ok_or_else(|| format!("--kernel {v:?}: a version, as 6.12"))?);
            }
            a if a.starts_with('-') => return Err(format!("unknown flag {a}\n{USAGE}")),
            a if o.obj.is_empty() => o.obj = a.to_string(),
            a => return Err(format!("unexpected argument {a:?}\n{USAGE}")),
        }
        i += 1;
    }
    if o.obj.is_empty() && !forward {
        return Err(format!("no object file given\n{USAGE}"));
    }
    if !["interp", "jit", "aot"].contains(&o.engine.as_str()) {
        return Err(format!("--engine {:?}: use interp, jit or aot (with an object from fastpath rt compile)", o.engine));
    }
    Ok(o)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn run(args: &[String]) -> Result<(), String> {
    let Some(cmd) = args.first() else { return Err(USAGE.into()) };
    let mut o = parse(&args[1..], cmd == "forward")?;
    if let Some(v) = o.kernel {
        kernel::set_semantics(v)?;
    }
    // The metrics address first: a taken or bad one fails the start at
    // once, before anything is loaded or attached.
    let metrics = match (&o.metrics, cmd.as_str()) {
        (None, _) => None,
        (Some(a), "run" | "forward") => Some(fastpath_rt::metrics::listen(a)?),
        (Some(_), c) => return Err(format!("--metrics is for run and forward, not {c}")),
    };
    if cmd == "forward" {
        return run_xsk(None, &o, metrics);
    }
    let obj = if fastpath_rt::aot::is_native(&o.obj) {
        // An AOT object: its ELF, checked by hash, and its code.
        let native = fastpath_rt::aot::read(&o.obj)?;
        let (elf, data) = fastpath_rt::aot::elf_of(&native, &o.obj, o.elf.as_deref())?;
        if !o.engine_given {
            o.engine = "aot".into();
        }
        o.native = Some(native);
        BpfObject::parse(&elf, &data)?
    } else {
        if o.engine == "aot" {
            return Err(format!("--engine aot needs an object from fastpath rt compile, and {} is an ELF object", o.obj));
        }
        BpfObject::load(&o.obj)?
    };
    let o = &o;
    match cmd.as_str() {
        "compile" => compile(&obj, o),
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
            println!("runtime: {}", kernel::semantics().describe());
            Ok(())
        }
        "test-run" => test_run(&obj, o),
        "run" => run_xsk(Some(&obj), o, metrics),
        c => Err(format!("unknown command {c:?}\n{USAGE}")),
    }
}

/// Every map but ring buffers, keys sorted, as the inside of a JSON object.
fn maps_json(vm: &Vm) -> String {
    let mut maps = Vec::new();
    for m in vm.maps.iter() {
        if m.def.map_type == map_type::RINGBUF {
            continue;
        }
        let es: Vec<String> = m.entries().iter().map(|(k, v)| format!("[\"{}\",\"{}\"]", hex(k), hex(v))).collect();
        maps.push(format!("\"{}\":{{\"type\":\"{}\",\"percpu\":{},\"entries\":[{}]}}", m.def.name, map_type::name(m.def.map_type), m.percpu(), es.join(",")));
    }
    maps.join(",")
}

/// Writes the maps to a file whole (through a rename), for readers of a
/// running instance.
fn write_maps(vm: &Vm, path: &str) -> Result<(), String> {
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, format!("{{{}}}\n", maps_json(vm))).map_err(|e| format!("{tmp}: {e}"))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{path}: {e}"))
}

/// `compile`: every program the runtime can run, verified by the kernel
/// first, compiled to one image and written with the ELF's hash.
fn compile(obj: &BpfObject, o: &Opts) -> Result<(), String> {
    if o.native.is_some() {
        return Err(format!("{} is compiled already", o.obj));
    }
    if obj.programs.is_empty() {
        obj.program(None)?;
    }
    if o.verify {
        for p in &obj.programs {
            kernel::verify(obj, p)?;
        }
    }
    let opts = fastpath_rt::jit::Opts::parse(o.opt.as_deref().unwrap_or("all"))?;
    let mut vm = Vm::new(obj, 1)?;
    if let Some(path) = &o.maps_in {
        fill_maps(&mut vm, path)?;
    }
    let mut named = Vec::new();
    for n in &o.const_maps {
        named.push(vm.map_index(n).ok_or_else(|| format!("--const-map {n}: the object has no such map"))?);
    }
    if !named.is_empty() && !opts.const_maps {
        return Err(format!("--const-map with --opt {}: add const-maps", opts.names()));
    }
    let (image, stats) = fastpath_rt::jit::compile_with(&vm, opts, &named)?;
    // Every map the code holds, and every one named constant, by content.
    let held: std::collections::BTreeSet<usize> = stats.folded_maps.iter().copied().chain(named.iter().copied()).collect();
    let maps: Vec<(String, [u8; 32])> = held.iter().map(|&i| (vm.maps[i].def.name.clone(), fastpath_rt::aot::map_digest(&vm.maps[i]))).collect();
    let out = o.output.clone().unwrap_or_else(|| format!("{}.native", o.obj));
    let data = std::fs::read(&o.obj).map_err(|e| format!("{}: {e}", o.obj))?;
    fastpath_rt::aot::write(&out, &o.obj, &data, &image, opts, &stats, &maps)?;
    let refused: Vec<&str> = vm.programs.iter().filter(|p| p.refused.is_some()).map(|p| p.name.as_str()).collect();
    println!(
        "{out}: {} program(s), {} functions, {} bytes of code, from {} (sha256 {}){}",
        vm.programs.len() - refused.len(),
        image.funcs.len(),
        image.code.len(),
        o.obj,
        hex(&fastpath_rt::aot::sha256(&data)),
        if refused.is_empty() { String::new() } else { format!("; not compiled (the runtime cannot run them): {}", refused.join(", ")) }
    );
    println!("{out}: {}", aot_summary(opts, &stats, &maps.iter().map(|m| m.0.clone()).collect::<Vec<_>>()));
    Ok(())
}

/// One line on an AOT object's options and what they did.
fn aot_summary(opts: fastpath_rt::jit::Opts, s: &fastpath_rt::jit::Stats, maps: &[String]) -> String {
    format!(
        "--opt {}: {} bounds checks left out, {} lookups and {} bpf_csum_diff inline{}, {} loads folded{}",
        opts.names(),
        s.elided_checks,
        s.inlined_lookups,
        s.inlined_csum,
        match s.csum_folded {
            Some(true) => " (folded semantics)",
            Some(false) => " (unfolded semantics)",
            None => "",
        },
        s.folded_loads,
        if maps.is_empty() { String::new() } else { format!(", maps compiled in: {}", maps.join(", ")) }
    )
}

/// The "aot" object of test-run's JSON.
fn aot_json(n: &fastpath_rt::aot::Native) -> String {
    let s = &n.stats;
    let maps: Vec<String> = n.maps.iter().map(|m| format!("\"{}\"", m.0)).collect();
    format!(
        "{{\"opts\":\"{}\",\"elided_checks\":{},\"inlined_lookups\":{},\"inlined_csum\":{},\"csum_diff\":\"{}\",\"folded_loads\":{},\"const_maps\":[{}]}}",
        n.opts.names(),
        s.elided_checks,
        s.inlined_lookups,
        s.inlined_csum,
        match s.csum_folded {
            Some(true) => "folded",
            Some(false) => "unfolded",
            None => "none",
        },
        s.folded_loads,
        maps.join(",")
    )
}

/// The compiled code for an engine: none for the interpreter, compiled now
/// for the JIT, loaded from the AOT object for aot.
fn native_code(vm: &Vm, prog: usize, o: &Opts) -> Result<Option<Jit>, String> {
    match (o.engine.as_str(), &o.native) {
        ("jit", _) => Jit::compile(vm, prog).map(Some),
        ("aot", Some(n)) => {
            fastpath_rt::aot::check_vm(n, vm, &o.obj)?;
            Jit::load(vm, prog, &n.image).map(Some)
        }
        ("aot", None) => Err("--engine aot needs an object from fastpath rt compile".into()),
        _ => Ok(None),
    }
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
    let jit = native_code(&vm, prog, o)?;
    let mut results = Vec::new();
    let mut outs = Vec::new();
    let (mut total_ns, mut total_steps, mut runs) = (0u128, 0u64, 0u64);
    for (n, frame) in pkts.iter().enumerate() {
        // A frame the kernel refuses fails that run alone, with its errno.
        let mut pkt = match Packet::for_test_run(frame, 1, 0) {
            Ok(p) => p,
            Err((errno, why)) => {
                if !o.json {
                    eprintln!("fastpath-rt: packet {}: {why} (error {errno})", n + 1);
                }
                results.push(format!("{{\"ret\":0,\"errno\":{errno},\"out\":\"\",\"ringbuf\":[]}}"));
                outs.push(Vec::new());
                continue;
            }
        };
        let mut ret = 0;
        let start = Instant::now();
        let mut steps = 0;
        match &jit {
            Some(j) => {
                let mut r = j.runner(&mut vm, prog, &mut pkt).map_err(|e| e.to_string())?;
                for _ in 0..o.repeat {
                    ret = r.run().map_err(|e| format!("packet {}: {e}", n + 1))?;
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
        for m in vm.maps.iter() {
            let name = m.def.name.clone();
            if let Some(mut r) = m.ringbuf() {
                for rec in r.drain() {
                    rb.push(format!("{{\"map\":\"{name}\",\"data\":\"{}\"}}", hex(&rec)));
                }
            }
        }
        let out = pkt.output();
        results.push(format!("{{\"ret\":{ret},\"errno\":0,\"out\":\"{}\",\"ringbuf\":[{}]}}", hex(&out), rb.join(",")));
        outs.push(out);
    }
    if let Some(path) = &o.out {
        pcap::write(path, &outs)?;
    }
    let ns = if runs > 0 { total_ns as f64 / runs as f64 } else { 0.0 };
    let insns = if runs > 0 { total_steps as f64 / runs as f64 } else { 0.0 };
    let per_insn = if total_steps > 0 { total_ns as f64 / total_steps as f64 } else { 0.0 };
    if o.json {
        let maps = if o.dump { maps_json(&vm) } else { String::new() };
        println!(
            "{{\"program\":\"{}\",\"engine\":\"{}\",\"semantics\":\"{}\",{}\"runs\":{runs},\"ns_per_run\":{ns:.1},\"insns_per_run\":{insns:.1},\"ns_per_insn\":{per_insn:.2},\"packets\":[{}],\"maps\":{{{}}}}}",
            def.name,
            o.engine,
            vm.sem.describe(),
            match (&o.native, o.engine.as_str()) {
                (Some(n), "aot") => format!("\"aot\":{},", aot_json(n)),
                _ => String::new(),
            },
            results.join(","),
            maps
        );
    } else {
        println!("{}: {} packets, {runs} runs, {ns:.1} ns per run, {insns:.1} instructions per run, {per_insn:.2} ns per instruction ({})", def.name, pkts.len(), o.engine);
        if let (Some(n), "aot") = (&o.native, o.engine.as_str()) {
            println!("{}: {}", o.obj, aot_summary(n.opts, &n.stats, &n.maps.iter().map(|m| m.0.clone()).collect::<Vec<_>>()));
        }
    }
    Ok(())
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

static DUMP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGUSR1 {
        DUMP.store(true, std::sync::atomic::Ordering::Relaxed);
    } else {
        STOP.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// When one queue's thread saw traffic; what it counted is in its ports'
/// [`PortStats`](fastpath_rt::metrics::PortStats).
#[derive(Default)]
struct QueueCounts {
    first: Option<Instant>,
    last: Option<Instant>,
    /// The thread's stage profile (--profile-stages).
    profile: Option<profile::Stages>,
}

/// Runs the program over AF_XDP: one thread per queue, each with a socket
/// on that queue of every device, the sockets of a thread sharing one UMEM,
/// and all threads sharing the object's maps (per-CPU values per thread).
/// The program runs on the frame where it arrived. TX sends it back out of
/// the port it came in; REDIRECT out of another port of the thread (by
/// ifindex, or through a devmap entry), the same frame; PASS to the TAP
/// device if one is named (else it is dropped and counted); DROP and
/// ABORTED recycle the frame. Without an object (`forward`) every frame goes
/// out of the next port: the same rings with no program, the I/O ceiling.
/// Stops after the duration or on a signal; SIGUSR1 writes the maps to
/// --maps-out. With a metrics listener, serves what the ports counted
/// while it runs.
fn run_xsk(obj: Option<&BpfObject>, o: &Opts, listener: Option<std::net::TcpListener>) -> Result<(), String> {
    use fastpath_rt::metrics::{self, Metrics};
    use fastpath_rt::xsk::{Redirector, Tap};
    if o.devs.is_empty() {
        return Err("run needs --dev IFACE".into());
    }
    let mut vm = None;
    let mut prog = 0;
    let mut name = "forward".to_string();
    if let Some(obj) = obj {
        let def = obj.program(o.prog.as_deref())?;
        if o.verify {
            kernel::verify(obj, def)?;
        }
        let mut v = Vm::new(obj, o.queues as usize)?;
        if let Some(path) = &o.maps_in {
            fill_maps(&mut v, path)?;
        }
        prog = v.program_index(&def.name)?;
        native_code(&v, prog, o)?; // refuse before anything is attached
        name = def.name.clone();
        vm = Some(v);
    }
    let name = name.as_str();
    let tap = match &o.tap {
        Some(n) => Some(Tap::open(n)?),
        None => None,
    };
    let mut devs = Vec::new();
    for dev in &o.devs {
        let cname = std::ffi::CString::new(dev.as_str()).map_err(|_| "bad interface name")?;
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(format!("interface {dev} not found in this network namespace"));
        }
        devs.push((dev.clone(), ifindex));
    }
    let stats = std::sync::Arc::new(Metrics::new(&o.devs, o.queues, o.generic));
    if let Some(l) = listener {
        if let Ok(a) = l.local_addr() {
            eprintln!("fastpath-rt: serving metrics on http://{a}/metrics");
        }
        metrics::serve(l, stats.clone());
    }
    let stats = &*stats;
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGUSR1, on_signal as *const () as libc::sighandler_t);
    }
    // Sockets first (their errors say more than an attach's), then the
    // redirect programs, then the bindings.
    let mut redirs: Vec<Redirector> = Vec::new();
    let start = Instant::now();
    let results: Vec<Result<QueueCounts, String>> = std::thread::scope(|sc| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let mut handles = Vec::new();
        let redirs_ref = &mut redirs;
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let go_rx = std::sync::Arc::new(std::sync::Mutex::new(go_rx));
        let attached = std::sync::Arc::new(std::sync::RwLock::new(Vec::<(u32, i32)>::new()));
        for q in 0..o.queues {
            let mut tvm = vm.as_ref().map(|v| v.for_thread(q as usize));
            let devs = &devs;
            let tap = tap.as_ref();
            let ready = ready_tx.clone();
            let go = go_rx.clone();
            let attached = attached.clone();
            handles.push(sc.spawn(move || {
                if o.profile {
                    // Calibrated before the sockets open: nothing waits on it.
                    let p = profile::Stages::calibrated(std::time::Duration::from_millis(20));
                    serve_queue(p, tvm.as_mut(), prog, name, o, q, devs, tap, ready, go, attached, stats)
                } else {
                    serve_queue(profile::Off, tvm.as_mut(), prog, name, o, q, devs, tap, ready, go, attached, stats)
                }
            }));
        }
        drop(ready_tx);
        let mut opened = 0;
        let mut err = None;
        for r in ready_rx.iter().take(o.queues as usize) {
            match r {
                Ok(()) => opened += 1,
                Err(e) => err = Some(e),
            }
        }
        if err.is_none() && opened == o.queues {
            for (dev, ifindex) in &devs {
                match Redirector::attach(*ifindex, o.queues, o.generic) {
                    Ok(r) => {
                        attached.write().unwrap().push((*ifindex, r.map_fd()));
                        redirs_ref.push(r);
                        stats.set_attached(dev, true);
                    }
                    Err(e) => {
                        err = Some(format!("{dev}: {e}"));
                        break;
                    }
                }
            }
        }
        if err.is_some() {
            STOP.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        for _ in 0..o.queues {
            let _ = go_tx.send(());
        }
        // A runtime whose parent died (a lab bench killed mid-run) stops
        // rather than keep its programs attached.
        let parent = unsafe { libc::getppid() };
        while !STOP.load(std::sync::atomic::Ordering::Relaxed) && (o.duration == 0.0 || start.elapsed().as_secs_f64() < o.duration) {
            if unsafe { libc::getppid() } != parent {
                break;
            }
            if DUMP.swap(false, std::sync::atomic::Ordering::Relaxed) {
                if let (Some(p), Some(vm)) = (&o.maps_out, &vm) {
                    if let Err(e) = write_maps(vm, p) {
                        eprintln!("fastpath-rt: {e}");
                    }
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        STOP.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut out: Vec<Result<QueueCounts, String>> = handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a queue's thread panicked".into()))).collect();
        if let Some(e) = err {
            out.push(Err(e));
        }
        out
    });
    drop(redirs);
    for d in &o.devs {
        stats.set_attached(d, false);
    }
    let mut t = QueueCounts::default();
    let mut prof: Option<profile::Stages> = None;
    for r in results {
        let c = r?;
        if let Some(p) = &c.profile {
            match &mut prof {
                Some(all) => all.add(p),
                None => prof = Some(p.clone()),
            }
        }
        t.first = match (t.first, c.first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        t.last = t.last.max(c.last);
    }
    if let (Some(p), Some(vm)) = (&o.maps_out, &vm) {
        write_maps(vm, p)?;
    }
    // Rates over the time traffic came, not the time waited for it.
    let secs = match (t.first, t.last) {
        (Some(f), Some(l)) => l.duration_since(f).as_secs_f64(),
        _ => 0.0,
    };
    // The totals and each queue's, from what the ports counted.
    let mut all = metrics::PortCounts::default();
    let mut per_queue = vec![0u64; o.queues as usize];
    for p in &stats.ports {
        let c = p.counts();
        per_queue[p.queue as usize] += c.packets.iter().sum::<u64>();
        for (a, b) in all.packets.iter_mut().zip(c.packets) {
            *a += b;
        }
        for (a, b) in all.errors.iter_mut().zip(c.errors) {
            *a += b;
        }
    }
    let per_queue: Vec<String> = per_queue.iter().map(u64::to_string).collect();
    let c = all.packets;
    let total: u64 = c.iter().sum();
    let pps = if secs > 0.0 { total as f64 / secs } else { 0.0 };
    let (faults, pass_without_tap, redirect_dropped, tx_ring_full) =
        (all.errors[metrics::PROGRAM_FAULT], all.errors[metrics::PASS_WITHOUT_TAP], all.errors[metrics::REDIRECT_NO_PORT], all.errors[metrics::TX_RING_FULL]);
    if o.json {
        println!(
            "{{\"program\":\"{}\",\"engine\":\"{}\",\"queues\":{},\"seconds\":{secs:.3},\"packets\":{total},\"pps\":{pps:.0},\"aborted\":{},\"drop\":{},\"pass\":{},\"tx\":{},\"redirect\":{},\"faults\":{},\"pass_without_tap\":{},\"redirect_dropped\":{},\"tx_ring_full\":{},\"per_queue\":[{}]{}}}",
            name, if vm.is_some() { o.engine.as_str() } else { "none" }, o.queues, c[0], c[1], c[2], c[3], c[4], faults, pass_without_tap, redirect_dropped, tx_ring_full, per_queue.join(","),
            prof.as_ref().map(|p| format!(",\"profile\":{}", p.json())).unwrap_or_default()
        );
        if let Some(p) = &prof {
            eprint!("{}", p.table());
        }
    } else {
        println!("{}: {total} packets in {secs:.1} s ({pps:.0} pps) on {} queue(s): aborted {}, drop {}, pass {} ({} without a TAP), tx {}, redirect {} ({} to no port of the runtime), faults {}", name, o.queues, c[0], c[1], c[2], pass_without_tap, c[3], c[4], redirect_dropped, faults);
        if let Some(p) = &prof {
            print!("{}", p.table());
        }
    }
    Ok(())
}

/// One queue's thread: opens its sockets on one shared UMEM, reports
/// ready, waits for the redirect programs, binds, then serves until told
/// to stop. Each pass takes a batch from every port's RX ring, runs the
/// program on each frame in place, and hands the frames on in batches.
#[allow(clippy::too_many_arguments)]
fn serve_queue<L: profile::Laps>(
    mut laps: L,
    mut vm: Option<&mut Vm>,
    prog: usize,
    name: &str,
    o: &Opts,
    q: u32,
    devs: &[(String, u32)],
    tap: Option<&fastpath_rt::xsk::Tap>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
    go: std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
    attached: std::sync::Arc<std::sync::RwLock<Vec<(u32, i32)>>>,
    stats: &fastpath_rt::metrics::Metrics,
) -> Result<QueueCounts, String> {
    use fastpath_rt::metrics::{PortCounts, PortStats, PASS_WITHOUT_TAP, PROGRAM_FAULT, REDIRECT_NO_PORT, TX_RING_FULL};
    use fastpath_rt::vm::Redirect;
    use fastpath_rt::profile::Stage;
    use fastpath_rt::xsk::{bind_xskmap, Desc, Socket, Umem, FRAME, RING};
    let batch = o.batch;
    struct Port<'a> {
        ifindex: u32,
        sock: Socket,
        tx: Vec<Desc>,
        /// This thread's counts for the port, published to `stats` after
        /// each pass.
        counts: PortCounts,
        stats: &'a PortStats,
    }
    impl Drop for Port<'_> {
        // Before the socket closes (its fields drop after this).
        fn drop(&mut self) {
            self.stats.clear_socket();
        }
    }
    let fail = |e: String| {
        let _ = ready.send(Err(e.clone()));
        Err(e)
    };
    let jit = match &vm {
        Some(v) => native_code(v, prog, o)?,
        None => None,
    };
    // Room for every port's fill and TX rings.
    let mut umem = match Umem::new(devs.len() * 2 * RING as usize) {
        Ok(u) => u,
        Err(e) => return fail(e),
    };
    let mut ports: Vec<Port> = Vec::new();
    for (dev, ifindex) in devs {
        match Socket::open(&mut umem, ports.first().map(|p| &p.sock), *ifindex, q, o.need_wakeup) {
            Ok(sock) => {
                if o.busy_poll {
                    if let Err(e) = sock.busy_poll() {
                        return fail(e);
                    }
                }
                let stats = stats.port(dev, q).ok_or("no counters for a port")?;
                ports.push(Port { ifindex: *ifindex, sock, tx: Vec::with_capacity(batch as usize * devs.len()), counts: PortCounts::default(), stats });
            }
            Err(e) => return fail(format!("{e}: does {dev} support AF_XDP and have {} queue(s)?", o.queues)),
        }
    }
    let _ = ready.send(Ok(()));
    let _ = go.lock().unwrap().recv();
    if STOP.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(QueueCounts::default());
    }
    for p in &ports {
        let map = attached.read().unwrap().iter().find(|(i, _)| *i == p.ifindex).map(|&(_, fd)| fd).ok_or("no redirect program for a port")?;
        bind_xskmap(map, q, &p.sock)?;
        p.stats.set_socket(p.sock.fd, p.sock.zero_copy);
        let dev = &devs.iter().find(|(_, i)| *i == p.ifindex).unwrap().0;
        eprintln!(
            "fastpath-rt: {name} on {dev} queue {q}, {} mode, {} ({}), {}",
            if p.sock.zero_copy { "zero-copy" } else { "copy" },
            if vm.is_some() { o.engine.as_str() } else { "no program" },
            if o.generic { "generic XDP" } else { "native XDP" },
            if ports.len() > 1 { "UMEM shared by the queue's sockets" } else { "own UMEM" }
        );
    }
    let mut c = QueueCounts::default();
    let mut pkt = Packet::empty(0, q);
    let mut rx = Vec::with_capacity(batch as usize);
    let mut idle = 0usize;
    let n = ports.len();
    laps.start();
    while !STOP.load(std::sync::atomic::Ordering::Relaxed) {
        let mut got = 0;
        for pi in 0..n {
            rx.clear();
            ports[pi].sock.recv(batch, &mut rx);
            if rx.is_empty() {
                laps.lap(Stage::Wait);
                continue;
            }
            got += rx.len();
            laps.frames(rx.len());
            let now = Instant::now();
            c.last = Some(now);
            c.first.get_or_insert(now);
            laps.lap(Stage::Rx);
            let Some(vm) = vm.as_deref_mut() else {
                // No program: on to the next port, as they came.
                let next = (pi + 1) % n;
                for d in &rx {
                    ports[pi].counts.verdict(4, d.len);
                    ports[next].tx.push(*d);
                }
                laps.lap(Stage::Redirect);
                continue;
            };
            for d in &rx {
                let base = d.addr & !(FRAME as u64 - 1);
                let chunk = umem.chunk(d.addr);
                // The program runs on the frame in the UMEM: no copy.
                if unsafe { pkt.attach(chunk, (d.addr - base) as usize, d.len as usize) }.is_err() {
                    // Counted once as every frame is: aborted, and why.
                    ports[pi].counts.verdict(0, d.len);
                    ports[pi].counts.errors[PROGRAM_FAULT] += 1;
                    umem.recycle(d.addr);
                    continue;
                }
                pkt.ctx.ingress_ifindex = ports[pi].ifindex;
                pkt.ctx.rx_queue_index = q;
                laps.lap(Stage::Ctx);
                let r = match &jit {
                    Some(j) => j.run(vm, prog, &mut pkt),
                    None => Exec::new(vm, &mut pkt).run(prog),
                };
                laps.lap(Stage::Prog);
                let ret = r.unwrap_or_else(|_| {
                    ports[pi].counts.errors[PROGRAM_FAULT] += 1;
                    0
                });
                // The kernel takes the return code as 32 bits, and one it
                // does not know as ABORTED (the frame is dropped).
                let act = ret as u32;
                ports[pi].counts.verdict(if act <= 4 { act as usize } else { 0 }, d.len);
                let out = Desc { addr: base + pkt.data as u64, len: (pkt.data_end - pkt.data) as u32, options: 0 };
                match ret as u32 {
                    3 => ports[pi].tx.push(out),
                    4 => {
                        let target = match &pkt.redirect {
                            Some(Redirect::Ifindex(i)) => Some(*i),
                            Some(Redirect::Map { target, .. }) => Some(*target),
                            None => None,
                        };
                        match target.and_then(|t| ports.iter().position(|p| p.ifindex == t)) {
                            Some(t) => ports[t].tx.push(out),
                            None => {
                                ports[pi].counts.errors[REDIRECT_NO_PORT] += 1;
                                umem.recycle(d.addr);
                            }
                        }
                    }
                    2 => {
                        if !tap.map(|t| t.write(umem.frame(&out))).unwrap_or(false) {
                            ports[pi].counts.errors[PASS_WITHOUT_TAP] += 1;
                        }
                        umem.recycle(d.addr);
                    }
                    _ => umem.recycle(d.addr),
                }
                laps.lap(Stage::Redirect);
            }
        }
        for p in ports.iter_mut() {
            if !p.tx.is_empty() {
                let sent = p.sock.enqueue(&mut umem, &p.tx);
                p.counts.errors[TX_RING_FULL] += (p.tx.len() - sent) as u64;
                p.tx.clear();
                laps.lap(Stage::Tx);
                if sent > 0 {
                    p.sock.kick(o.kick);
                    laps.lap(Stage::Kick);
                }
            }
            p.sock.reclaim(&mut umem);
            laps.lap(Stage::Comp);
            if got > 0 {
                p.counts.publish(p.stats);
                laps.lap(Stage::Stats);
            }
        }
        for p in ports.iter_mut() {
            p.sock.refill(&mut umem, o.fill);
        }
        laps.lap(Stage::Fill);
        if got == 0 {
            idle += 1;
            let i = idle % n;
            if o.busy_poll {
                ports[i].sock.poke();
            } else if ports[i].sock.rx_needs_wakeup() {
                ports[i].sock.wait(1);
            }
            laps.lap(Stage::Wait);
        }
    }
    laps.stop();
    c.profile = laps.into_stages();
    Ok(c)
}
