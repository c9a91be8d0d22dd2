//! fastpath's userspace XDP runtime: loads the ELF objects the kernel gets,
//! has the kernel's verifier check each program, and runs it over packets
//! with the kernel's map and helper semantics.

pub mod aot;
pub mod btf;
pub mod elf;
pub mod fib;
pub mod helpers;
pub mod insn;
pub mod interp;
pub mod jit;
pub mod kernel;
pub mod maps;
pub mod mapsfile;
pub mod metrics;
pub mod pcap;
pub mod profile;
pub mod ranges;
pub mod sys;
pub mod vm;
pub mod xsk;
