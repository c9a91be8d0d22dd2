//! fastpath-rt-peers: one program, one sample frame and one set of maps,
//! run by fastpath-rt's engines and by other userspace eBPF engines in the
//! same timing loop, so that their nanoseconds per run compare.
//!
//! Every engine gets its own copy of the object's maps (fastpath-rt's maps,
//! filled from the same file) and its own frame. Peers have no maps or XDP
//! helpers of their own: the harness gives each the same host functions,
//! over fastpath-rt's maps, and the same context. The context sits with the
//! frame below 4 GiB, so the 32-bit `data` and `data_end` fields an XDP
//! program loads are the frame's real addresses: no engine needs the
//! verifier's rewrite of context accesses.
//!
//! Each engine's first run, from fresh maps, is its check run: its verdict,
//! frame, ring buffer records and maps are compared with those of
//! fastpath-rt's interpreter (which the test suite holds against the
//! kernel). Then `--rounds` rounds of `--repeat` runs each are timed, the
//! engines' order turning each round; the best round counts.

mod engines;
mod host;

use std::time::Instant;

use fastpath_rt::elf::BpfObject;
use fastpath_rt::vm::Vm;

use engines::Engine;

struct Args {
    obj: String,
    prog: Option<String>,
    input: String,
    maps_in: Option<String>,
    native: Option<String>,
    repeat: u64,
    rounds: u32,
    first_round: u32,
    engines: Vec<String>,
    ubpf_lib: Option<String>,
    plugins: Vec<(String, String)>,
}

const USAGE: &str = "usage: fastpath-rt-peers --obj OBJ.o --in FRAME.pcap [--prog NAME] [--maps-in MAPS.json] [--native OBJ.native]
                  [--repeat N] [--rounds N] [--first-round N] [--engines E,E,...] [--ubpf-lib LIB.so] [--plugin NAME=LIB.so]
engines: fastpath-interp fastpath-jit fastpath-aot rbpf-interp rbpf-jit rbpf-cranelift ubpf-interp ubpf-jit NAME-jit NAME-aot (a plugin's)
prints one JSON object per engine: its check run against fastpath-interp's, and its best time per run";

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        obj: String::new(),
        prog: None,
        input: String::new(),
        maps_in: None,
        native: None,
        repeat: 100_000,
        rounds: 3,
        first_round: 0,
        engines: Vec::new(),
        ubpf_lib: None,
        plugins: Vec::new(),
    };
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let mut val = || -> Result<String, String> {
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag {
            "--obj" => a.obj = val()?,
            "--prog" => a.prog = Some(val()?),
            "--in" => a.input = val()?,
            "--maps-in" => a.maps_in = Some(val()?),
            "--native" => a.native = Some(val()?),
            "--repeat" => a.repeat = val()?.parse().map_err(|e| format!("--repeat: {e}"))?,
            "--rounds" => a.rounds = val()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--first-round" => {
                a.first_round = val()?.parse().map_err(|e| format!("--first-round: {e}"))?
            }
            "--engines" => {
                a.engines = val()?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            }
            "--ubpf-lib" => a.ubpf_lib = Some(val()?),
            "--plugin" => {
                let v = val()?;
                let (n, p) = v
                    .split_once('=')
                    .ok_or_else(|| format!("--plugin {v:?}: give NAME=LIB.so"))?;
                a.plugins.push((n.to_string(), p.to_string()));
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
        i += 1;
    }
    if a.obj.is_empty() || a.input.is_empty() {
        return Err(USAGE.to_string());
    }
    if a.repeat == 0 || a.rounds == 0 {
        return Err("--repeat and --rounds must be at least 1".into());
    }
    if a.engines.is_empty() {
        a.engines = [
            "fastpath-interp",
            "fastpath-jit",
            "rbpf-interp",
            "rbpf-jit",
            "rbpf-cranelift",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if a.native.is_some() {
            a.engines.insert(2, "fastpath-aot".into());
        }
        if a.ubpf_lib.is_some() {
            a.engines
                .extend(["ubpf-interp".to_string(), "ubpf-jit".to_string()]);
        }
        for (n, _) in &a.plugins {
            a.engines.extend([format!("{n}-jit"), format!("{n}-aot")]);
        }
    }
    Ok(a)
}

/// What a check run left: verdict, frame, ring buffer records, maps.
#[derive(PartialEq, Eq, Clone)]
pub struct Outcome {
    pub ret: u64,
    pub frame: Vec<u8>,
    pub ringbuf: Vec<Vec<u8>>,
    pub maps: Vec<(String, Vec<(Vec<u8>, Vec<u8>)>)>,
}

impl Outcome {
    /// The first difference from `want`, in words.
    fn differs(&self, want: &Outcome) -> Option<String> {
        if self.ret != want.ret {
            return Some(format!(
                "verdict {} where fastpath-interp gave {}",
                self.ret, want.ret
            ));
        }
        if self.frame != want.frame {
            return Some(format!(
                "frame of {} bytes differs from fastpath-interp's ({} bytes)",
                self.frame.len(),
                want.frame.len()
            ));
        }
        if self.ringbuf != want.ringbuf {
            return Some(format!(
                "{} ring buffer records where fastpath-interp wrote {} (or their bytes differ)",
                self.ringbuf.len(),
                want.ringbuf.len()
            ));
        }
        for ((name, got), (_, exp)) in self.maps.iter().zip(&want.maps) {
            if got != exp {
                return Some(format!(
                    "map {name} differs from fastpath-interp's after the run"
                ));
            }
        }
        None
    }
}

/// Maps' contents after a run, per-CPU values as stored.
pub fn dump_maps(vm: &Vm) -> Vec<(String, Vec<(Vec<u8>, Vec<u8>)>)> {
    vm.maps
        .iter()
        .filter(|m| m.ringbuf().is_none())
        .map(|m| {
            let mut e = m.entries();
            e.sort();
            (m.def.name.clone(), e)
        })
        .collect()
}

pub fn drain_ringbufs(vm: &Vm) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for m in vm.maps.iter() {
        if let Some(mut r) = m.ringbuf() {
            out.extend(r.drain());
        }
    }
    out
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fastpath-rt-peers: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&a) {
        eprintln!("fastpath-rt-peers: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<(), String> {
    let obj = BpfObject::load(&a.obj)?;
    let name = obj.program(a.prog.as_deref())?.name.clone();
    let frames = fastpath_rt::pcap::read(&a.input)?;
    let frame = frames
        .first()
        .ok_or_else(|| format!("{}: no frame", a.input))?
        .clone();
    let ctx = engines::Setup {
        obj: &obj,
        prog: &name,
        frame: &frame,
        maps_in: a.maps_in.as_deref(),
        native: a.native.as_deref(),
        ubpf_lib: a.ubpf_lib.as_deref(),
        plugins: &a.plugins,
    };

    // The reference: fastpath-rt's interpreter, one run from fresh maps.
    let want = Engine::new("fastpath-interp", &ctx)?.check()?;

    struct Slot {
        name: String,
        engine: Option<Engine>,
        error: Option<String>,
        differs: Option<String>,
        best: f64,
    }
    let mut slots: Vec<Slot> = Vec::new();
    for e in &a.engines {
        let mut s = Slot {
            name: e.clone(),
            engine: None,
            error: None,
            differs: None,
            best: 0.0,
        };
        match Engine::new(e, &ctx).and_then(|mut eng| eng.check().map(|o| (eng, o))) {
            Ok((eng, got)) => {
                s.differs = got.differs(&want);
                s.engine = Some(eng);
            }
            Err(why) => s.error = Some(why),
        }
        slots.push(s);
    }
    let n = slots.len();
    for r in 0..a.rounds {
        // The order turns each round, so that no engine always runs first
        // (or last) on a machine whose speed drifts.
        let turn = (r + a.first_round) as usize % n.max(1);
        for k in 0..n {
            let s = &mut slots[(k + turn) % n];
            let Some(eng) = s.engine.as_mut() else {
                continue;
            };
            let start = Instant::now();
            if let Err(why) = eng.time(a.repeat) {
                s.error = Some(why);
                s.engine = None;
                continue;
            }
            let ns = start.elapsed().as_nanos() as f64 / a.repeat as f64;
            if s.best == 0.0 || ns < s.best {
                s.best = ns;
            }
        }
    }
    for s in &slots {
        let mut f = vec![
            format!("\"program\":{}", json_str(&name)),
            format!("\"engine\":{}", json_str(&s.name)),
        ];
        match (&s.error, &s.differs) {
            (Some(e), _) => f.push(format!("\"error\":{}", json_str(e))),
            (None, Some(d)) => {
                f.push(format!("\"differs\":{}", json_str(d)));
                f.push(format!("\"ns_per_run\":{:.2}", s.best));
            }
            (None, None) => f.push(format!("\"ns_per_run\":{:.2}", s.best)),
        }
        println!("{{{}}}", f.join(","));
    }
    Ok(())
}
