//! Where a frame's time goes in the AF_XDP loop (`run`/`forward`
//! `--profile-stages`). The loop marks the end of each stage with `lap`;
//! each lap gives the time since the previous one to that stage, so the
//! stages cover the loop's whole time and nothing twice. The clock is the
//! TSC where there is one (a few ns a read), calibrated once against
//! CLOCK_MONOTONIC; elsewhere CLOCK_MONOTONIC itself.
//!
//! The loop is generic over [`Laps`]: without the flag it is compiled with
//! [`Off`], whose laps are empty, so a run without the profile has not even
//! a branch for it.

use std::time::{Duration, Instant};

/// The stages of one pass of the loop, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// poll(2) or a busy-poll recvfrom, and peeks at an RX ring that held
    /// nothing.
    Wait = 0,
    /// Reading the RX ring: the producer index, the descriptors, the
    /// consumer update.
    Rx,
    /// Making the packet and its context on the frame.
    Ctx,
    /// The program (the engine), helpers included.
    Prog,
    /// The verdict: counters, the redirect's target port, the frame on
    /// that port's TX list (or back to the UMEM).
    Redirect,
    /// Descriptors onto the TX rings.
    Tx,
    /// sendto(2): the kernel sends what the TX ring holds.
    Kick,
    /// The completion rings back to the free list.
    Comp,
    /// The fill rings refilled.
    Fill,
    /// The ports' counters published for metrics and the summary.
    Stats,
}

pub const STAGES: usize = 10;

impl Stage {
    pub const ALL: [Stage; STAGES] =
        [Stage::Wait, Stage::Rx, Stage::Ctx, Stage::Prog, Stage::Redirect, Stage::Tx, Stage::Kick, Stage::Comp, Stage::Fill, Stage::Stats];

    pub fn name(self) -> &'static str {
        ["wait", "rx", "ctx", "prog", "redirect", "tx", "kick", "comp", "fill", "stats"][self as usize]
    }
}

/// What the loop calls at each stage's end.
pub trait Laps {
    fn start(&mut self);
    fn lap(&mut self, s: Stage);
    fn frames(&mut self, n: usize);
    fn stop(&mut self);
    /// The profile, when there is one.
    fn into_stages(self) -> Option<Stages>;
}

/// No profile: every call is empty and compiles to nothing.
pub struct Off;

impl Laps for Off {
    #[inline(always)]
    fn start(&mut self) {}
    #[inline(always)]
    fn lap(&mut self, _: Stage) {}
    #[inline(always)]
    fn frames(&mut self, _: usize) {}
    #[inline(always)]
    fn stop(&mut self) {}
    fn into_stages(self) -> Option<Stages> {
        None
    }
}

#[inline(always)]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

/// Nanoseconds per tick, from `span` of CLOCK_MONOTONIC against the ticks
/// that passed in it (1.0 where the ticks are nanoseconds).
pub fn calibrate(span: Duration) -> f64 {
    if cfg!(not(target_arch = "x86_64")) {
        return 1.0;
    }
    let (t0, i0) = (ticks(), Instant::now());
    std::thread::sleep(span);
    let (t1, i1) = (ticks(), Instant::now());
    i1.duration_since(i0).as_nanos() as f64 / (t1.wrapping_sub(t0)).max(1) as f64
}

/// The thread's CPU time in user space and in the kernel, and how often it
/// was switched out (getrusage RUSAGE_THREAD).
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
    pub voluntary: u64,
    pub involuntary: u64,
}

impl Usage {
    pub fn now() -> Usage {
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) };
        let d = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        Usage { user: d(r.ru_utime), system: d(r.ru_stime), voluntary: r.ru_nvcsw as u64, involuntary: r.ru_nivcsw as u64 }
    }

    fn since(self, b: Usage) -> Usage {
        Usage {
            user: self.user.saturating_sub(b.user),
            system: self.system.saturating_sub(b.system),
            voluntary: self.voluntary - b.voluntary,
            involuntary: self.involuntary - b.involuntary,
        }
    }

    fn add(&mut self, o: &Usage) {
        self.user += o.user;
        self.system += o.system;
        self.voluntary += o.voluntary;
        self.involuntary += o.involuntary;
    }
}

/// One thread's profile: ticks and laps per stage, frames received, and
/// the loop's wall time by CLOCK_MONOTONIC (the check on the ticks), and
/// its CPU time in user space and in the kernel: the stages are wall
/// time, so a thread switched out for another's work counts that too.
#[derive(Clone, Debug)]
pub struct Stages {
    pub ticks: [u64; STAGES],
    pub laps: [u64; STAGES],
    pub frames: u64,
    pub ns_per_tick: f64,
    pub wall: Duration,
    pub usage: Usage,
    /// What one lap costs (`lap_cost`), measured when the profile was made.
    pub lap_ns: f64,
    last: u64,
    began: Option<(Instant, Usage)>,
}

impl Stages {
    pub fn new(ns_per_tick: f64) -> Stages {
        Stages { ticks: [0; STAGES], laps: [0; STAGES], frames: 0, ns_per_tick, wall: Duration::ZERO, usage: Usage::default(), lap_ns: 0.0, last: 0, began: None }
    }

    /// A profile for a thread's loop: the clock calibrated over `span`,
    /// and the cost of a lap measured.
    pub fn calibrated(span: Duration) -> Stages {
        let mut s = Stages::new(calibrate(span));
        s.lap_ns = lap_cost(s.ns_per_tick);
        s
    }

    pub fn laps_total(&self) -> u64 {
        self.laps.iter().sum()
    }

    /// The profile's own time per frame: its laps times a lap's cost.
    pub fn own_ns_per_frame(&self) -> f64 {
        if self.frames > 0 {
            self.laps_total() as f64 * self.lap_ns / self.frames as f64
        } else {
            0.0
        }
    }

    /// Adds another thread's profile (ticks converted at each one's rate).
    pub fn add(&mut self, o: &Stages) {
        let r = o.ns_per_tick / self.ns_per_tick;
        for i in 0..STAGES {
            self.ticks[i] += (o.ticks[i] as f64 * r) as u64;
            self.laps[i] += o.laps[i];
        }
        self.frames += o.frames;
        self.wall += o.wall;
        self.usage.add(&o.usage);
        self.lap_ns = self.lap_ns.max(o.lap_ns);
    }

    pub fn ns(&self, s: Stage) -> f64 {
        self.ticks[s as usize] as f64 * self.ns_per_tick
    }

    pub fn total_ns(&self) -> f64 {
        Stage::ALL.iter().map(|&s| self.ns(s)).sum()
    }

    /// The time of every stage but waiting: the loop's work.
    pub fn busy_ns(&self) -> f64 {
        self.total_ns() - self.ns(Stage::Wait)
    }

    /// `"profile":{…}` for --json: per stage its ns, laps, ns per frame,
    /// share of the loop's time and of its work.
    pub fn json(&self) -> String {
        let (total, busy) = (self.total_ns(), self.busy_ns());
        let per = |ns: f64| if self.frames > 0 { ns / self.frames as f64 } else { 0.0 };
        let share = |ns: f64, of: f64| if of > 0.0 { ns / of } else { 0.0 };
        let stages: Vec<String> = Stage::ALL
            .iter()
            .map(|&s| {
                let ns = self.ns(s);
                let of_busy = if s == Stage::Wait { 0.0 } else { share(ns, busy) };
                format!(
                    "{{\"stage\":\"{}\",\"ns\":{ns:.0},\"laps\":{},\"ns_per_frame\":{:.1},\"share\":{:.4},\"share_of_busy\":{of_busy:.4}}}",
                    s.name(),
                    self.laps[s as usize],
                    per(ns),
                    share(ns, total)
                )
            })
            .collect();
        format!(
            "{{\"frames\":{},\"wall_ns\":{},\"stages_ns\":{total:.0},\"busy_ns\":{busy:.0},\"busy_ns_per_frame\":{:.1},\"ns_per_tick\":{:.6},\"lap_ns\":{:.1},\"own_ns_per_frame\":{:.1},\"user_ns\":{},\"system_ns\":{},\"voluntary_switches\":{},\"involuntary_switches\":{},\"stages\":[{}]}}",
            self.frames,
            self.wall.as_nanos(),
            per(busy),
            self.ns_per_tick,
            self.lap_ns,
            self.own_ns_per_frame(),
            self.usage.user.as_nanos(),
            self.usage.system.as_nanos(),
            self.usage.voluntary,
            self.usage.involuntary,
            stages.join(",")
        )
    }

    /// The table printed at exit.
    pub fn table(&self) -> String {
        let (total, busy) = (self.total_ns(), self.busy_ns());
        let per = |ns: f64| if self.frames > 0 { ns / self.frames as f64 } else { 0.0 };
        let u = &self.usage;
        let mut t = format!(
            "stage profile: {} frames, loop {:.3} s (stages {:.3} s, {:.3} s of it working): {:.1} ns of work per frame\n",
            self.frames,
            self.wall.as_secs_f64(),
            total / 1e9,
            busy / 1e9,
            per(busy)
        );
        t += &format!(
            "on the CPU {:.3} s: user {:.3} s, kernel {:.3} s; switched out {} times for other work, {} waiting\n",
            (u.user + u.system).as_secs_f64(),
            u.user.as_secs_f64(),
            u.system.as_secs_f64(),
            u.involuntary,
            u.voluntary
        );
        t += &format!("the profile's own cost: {:.1} ns a lap, {:.1} ns a frame\n", self.lap_ns, self.own_ns_per_frame());
        t += &format!("{:<9} {:>12} {:>12} {:>8} {:>8}\n", "stage", "laps", "ns/frame", "share", "of work");
        for s in Stage::ALL {
            let ns = self.ns(s);
            let of_busy = if s == Stage::Wait || busy <= 0.0 { "-".to_string() } else { format!("{:.1}%", 100.0 * ns / busy) };
            let share = if total > 0.0 { 100.0 * ns / total } else { 0.0 };
            t += &format!("{:<9} {:>12} {:>12.1} {:>7.1}% {:>8}\n", s.name(), self.laps[s as usize], per(ns), share, of_busy);
        }
        t
    }
}

impl Laps for Stages {
    fn start(&mut self) {
        self.began = Some((Instant::now(), Usage::now()));
        self.last = ticks();
    }

    #[inline(always)]
    fn lap(&mut self, s: Stage) {
        let t = ticks();
        self.ticks[s as usize] += t.wrapping_sub(self.last);
        self.laps[s as usize] += 1;
        self.last = t;
    }

    #[inline(always)]
    fn frames(&mut self, n: usize) {
        self.frames += n as u64;
    }

    fn stop(&mut self) {
        if let Some((b, u)) = self.began.take() {
            self.wall += b.elapsed();
            self.usage.add(&Usage::now().since(u));
        }
    }

    fn into_stages(self) -> Option<Stages> {
        Some(self)
    }
}

/// What one lap costs, in ns: a measure of the profile's own overhead.
pub fn lap_cost(ns_per_tick: f64) -> f64 {
    let mut s = Stages::new(ns_per_tick);
    const N: u64 = 1_000_000;
    let t0 = Instant::now();
    s.start();
    for i in 0..N {
        s.lap(Stage::ALL[(i % STAGES as u64) as usize]);
    }
    std::hint::black_box(&s);
    t0.elapsed().as_nanos() as f64 / N as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_cover_the_loop() {
        let mut s = Stages::new(calibrate(Duration::from_millis(20)));
        s.start();
        std::thread::sleep(Duration::from_millis(30));
        s.lap(Stage::Wait);
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {}
        s.lap(Stage::Prog);
        s.frames(100);
        s.stop();
        // The stages add up to the wall time, each where it was spent.
        let wall = s.wall.as_nanos() as f64;
        assert!((s.total_ns() - wall).abs() < 0.05 * wall, "stages {} ns, wall {} ns", s.total_ns(), wall);
        assert!(s.ns(Stage::Wait) > 25e6 && s.ns(Stage::Prog) > 15e6);
        assert_eq!(s.laps[Stage::Wait as usize], 1);
        let j: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(j["frames"], 100);
        let stages = j["stages"].as_array().unwrap();
        assert_eq!(stages.len(), STAGES);
        let share: f64 = stages.iter().map(|x| x["share"].as_f64().unwrap()).sum();
        assert!((share - 1.0).abs() < 0.01);
        let busy: f64 = stages.iter().map(|x| x["share_of_busy"].as_f64().unwrap()).sum();
        assert!((busy - 1.0).abs() < 0.01, "prog is all the work: {busy}");
        let per = stages[Stage::Prog as usize]["ns_per_frame"].as_f64().unwrap();
        assert!((per - s.ns(Stage::Prog) / 100.0).abs() < 1.0);
        assert!(s.table().contains("prog"));
    }

    #[test]
    fn threads_add_up() {
        let mut a = Stages::new(0.5);
        a.ticks[Stage::Rx as usize] = 1000;
        a.frames = 10;
        let mut b = Stages::new(1.0);
        b.ticks[Stage::Rx as usize] = 1000;
        b.frames = 5;
        a.add(&b);
        assert_eq!(a.frames, 15);
        assert!((a.ns(Stage::Rx) - 1500.0).abs() < 1.0);
    }

    #[test]
    fn no_frames_no_division() {
        let s = Stages::new(1.0);
        let j: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(j["busy_ns_per_frame"], 0.0);
        assert!(lap_cost(1.0) < 1000.0);
    }
}
