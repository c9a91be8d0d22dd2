//! The bpf(2) syscall and the attribute buffers it takes: the one place the
//! runtime calls it.

pub fn bpf(cmd: i64, attr: &mut [u8; 128]) -> Result<i32, std::io::Error> {
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as u32) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

pub fn put32(a: &mut [u8; 128], off: usize, v: u32) {
    a[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put64(a: &mut [u8; 128], off: usize, v: u64) {
    a[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
