//! The eBPF instruction encoding.

pub const CLASS_LD: u8 = 0x00;
pub const CLASS_LDX: u8 = 0x01;
pub const CLASS_ST: u8 = 0x02;
pub const CLASS_STX: u8 = 0x03;
pub const CLASS_ALU: u8 = 0x04;
pub const CLASS_JMP: u8 = 0x05;
pub const CLASS_JMP32: u8 = 0x06;
pub const CLASS_ALU64: u8 = 0x07;

pub const MODE_IMM: u8 = 0x00;
pub const MODE_MEM: u8 = 0x60;
pub const MODE_MEMSX: u8 = 0x80;
pub const MODE_ATOMIC: u8 = 0xc0;

/// src_reg of a call: a bpf-to-bpf call with a relative target.
pub const PSEUDO_CALL: u8 = 1;
/// src_reg of ld_imm64: imm is a map; a map value at the next imm's offset;
/// a function's relative offset.
pub const PSEUDO_MAP_FD: u8 = 1;
pub const PSEUDO_MAP_VALUE: u8 = 2;
pub const PSEUDO_FUNC: u8 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    pub fn from_bytes(b: [u8; 8]) -> Insn {
        Insn { code: b[0], regs: b[1], off: i16::from_le_bytes([b[2], b[3]]), imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]) }
    }

    pub fn to_bytes(self) -> [u8; 8] {
        let o = self.off.to_le_bytes();
        let i = self.imm.to_le_bytes();
        [self.code, self.regs, o[0], o[1], i[0], i[1], i[2], i[3]]
    }

    pub fn dst(self) -> usize {
        (self.regs & 0x0f) as usize
    }

    pub fn src(self) -> u8 {
        self.regs >> 4
    }

    pub fn set_src(&mut self, s: u8) {
        self.regs = (self.regs & 0x0f) | (s << 4);
    }

    pub fn class(self) -> u8 {
        self.code & 0x07
    }

    pub fn is_call(self) -> bool {
        self.code == CLASS_JMP | 0x80
    }

    pub fn is_ld_imm64(self) -> bool {
        self.code == CLASS_LD | MODE_IMM | 0x18
    }

    /// Access size in bytes of a load or store.
    pub fn size(self) -> usize {
        match self.code & 0x18 {
            0x00 => 4,
            0x08 => 2,
            0x10 => 1,
            _ => 8,
        }
    }
}
