//! Names the build for fastpath_build_info: fastpath's version and commit
//! (FASTPATH_VERSION and FASTPATH_COMMIT if set, else from git, as
//! scripts/version.sh and the Makefile name the Go binary's) and the
//! compiler's version. std only.

use std::process::Command;

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=FASTPATH_VERSION");
    println!("cargo:rerun-if-env-changed=FASTPATH_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    // A new commit changes HEAD, or the branch's ref, or packed-refs.
    for p in ["HEAD", "packed-refs"] {
        if let Some(path) = output(Command::new("git").args(["rev-parse", "--git-path", p])) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(r) = output(Command::new("git").args(["symbolic-ref", "-q", "HEAD"])) {
        if let Some(path) = output(Command::new("git").args(["rev-parse", "--git-path", &r])) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let version = std::env::var("FASTPATH_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| output(Command::new("bash").arg("../scripts/version.sh")))
        .unwrap_or_else(|| std::env::var("CARGO_PKG_VERSION").unwrap_or_default());
    let commit = std::env::var("FASTPATH_COMMIT").ok().filter(|v| !v.is_empty()).or_else(|| output(Command::new("git").args(["rev-parse", "HEAD"]))).unwrap_or_default();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    // "rustc 1.95.0 (59807616e 2026-04-14)" → "1.95.0"
    let rustversion = output(Command::new(rustc).arg("--version")).and_then(|v| v.split_whitespace().nth(1).map(str::to_string)).unwrap_or_default();
    println!("cargo:rustc-env=FASTPATH_RT_VERSION={version}");
    println!("cargo:rustc-env=FASTPATH_RT_COMMIT={commit}");
    println!("cargo:rustc-env=FASTPATH_RT_RUSTVERSION={rustversion}");
}
