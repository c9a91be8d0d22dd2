//! Maps with the kernel's semantics: sizes, update flags, error codes,
//! per-CPU values. Values live in arenas allocated once, so the pointers a
//! program holds stay valid, and one arena is one region for bounds checks.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::hash::{BuildHasherDefault, Hasher};

/// A fast hash for map keys (multiply and rotate per word, as FxHash):
/// SipHash's resistance to flooding is not needed for a map whose size the
/// program's author caps, and it cost a third of a lookup.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl KeyHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type KeyMap<V> = HashMap<Vec<u8>, V, BuildHasherDefault<KeyHasher>>;

use crate::elf::{map_type as mt, MapDef};

pub const EPERM: i64 = 1;
pub const ENOENT: i64 = 2;
pub const E2BIG: i64 = 7;
pub const EEXIST: i64 = 17;
pub const EINVAL: i64 = 22;
pub const ENOSPC: i64 = 28;
pub const ENOTSUP: i64 = 95;

pub const BPF_ANY: u64 = 0;
pub const BPF_NOEXIST: u64 = 1;
pub const BPF_EXIST: u64 = 2;

/// Tagged map references: what an ld_imm64 of a map, or a map-in-map
/// lookup, leaves in a register. Real pointers never have this top.
pub const MAP_HANDLE: u64 = 0xfff0_0000_0000_0000;

pub fn handle(idx: usize) -> u64 {
    MAP_HANDLE | idx as u64
}

pub fn handle_index(v: u64) -> Option<usize> {
    if v & 0xffff_0000_0000_0000 == MAP_HANDLE {
        Some((v & 0xffff_ffff) as usize)
    } else {
        None
    }
}

fn round8(n: usize) -> usize {
    (n + 7) & !7
}

/// Zeroed memory from the kernel, reserved but not committed: pages cost
/// nothing until they are written, and a size the address space cannot
/// hold is an error rather than an abort.
pub struct Zeroed {
    mem: *mut u8,
    len: usize,
}

unsafe impl Send for Zeroed {}
unsafe impl Sync for Zeroed {}

impl Zeroed {
    pub fn new(bytes: u128, what: &str) -> Result<Zeroed, String> {
        let len = usize::try_from(bytes.max(8)).ok().filter(|&n| n < isize::MAX as usize).ok_or_else(|| too_big(what, bytes, "beyond the address space"))?;
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(too_big(what, bytes, &std::io::Error::last_os_error().to_string()));
        }
        Ok(Zeroed { mem: p as *mut u8, len })
    }
}

impl Drop for Zeroed {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.mem as *mut libc::c_void, self.len) };
    }
}

fn too_big(what: &str, bytes: u128, why: &str) -> String {
    format!("{what}: {bytes} bytes ({:.1} GiB) of values cannot be allocated: {why}", bytes as f64 / (1u64 << 30) as f64)
}

/// One zeroed allocation that the writable maps' arenas and the ring
/// buffers are carved from, so that compiled code checks every map value
/// and ring buffer record with one range that never moves. It reserves
/// room (address space, not memory) for maps made later: the inner maps of
/// maps of maps.
pub struct Pool {
    mem: Zeroed,
    used: usize,
}

/// Address space kept in the pool for maps made after the object's.
const POOL_SPARE: u128 = 1 << 36;

impl Pool {
    pub fn new(bytes: u128) -> Result<Pool, String> {
        let mem = Zeroed::new(bytes + POOL_SPARE, "the maps").or_else(|_| Zeroed::new(bytes, "the maps"))?;
        Ok(Pool { mem, used: 0 })
    }

    fn take(&mut self, bytes: usize) -> Option<*mut u8> {
        let bytes = round8(bytes);
        if self.used + bytes > self.mem.len {
            return None;
        }
        let p = unsafe { self.mem.mem.add(self.used) };
        self.used += bytes;
        Some(p)
    }

    /// The whole reserved range: compiled code checks against it, and
    /// whatever of it no map uses yet is zero pages of the runtime's own.
    pub fn range(&self) -> (u64, u64) {
        let s = self.mem.mem as u64;
        (s, s + self.mem.len as u64)
    }
}

/// The bytes a map's values take, for sizing the pool.
pub fn arena_bytes(def: &MapDef, ncpus: usize) -> u128 {
    let percpu = matches!(def.map_type, mt::PERCPU_ARRAY | mt::PERCPU_HASH | mt::LRU_PERCPU_HASH);
    match def.map_type {
        mt::ARRAY | mt::PERCPU_ARRAY | mt::HASH | mt::PERCPU_HASH | mt::LRU_HASH | mt::LRU_PERCPU_HASH | mt::LPM_TRIE => {
            def.max_entries as u128 * round8(def.value_size.max(1) as usize) as u128 * if percpu { ncpus as u128 } else { 1 }
        }
        // Records are laid out in twice the ring's size, each contiguous.
        mt::RINGBUF => 2 * def.max_entries as u128,
        _ => 0,
    }
}

/// An arena of fixed-size slots, per CPU, that never moves. Programs on
/// several threads write its values as they would in the kernel: without a
/// lock, with atomics where they ask for them.
pub struct Arena {
    mem: *mut u8,
    /// The allocation, when the arena is not in a pool.
    _own: Option<Zeroed>,
    elem: usize,
    slots: usize,
    ncpus: usize,
}

unsafe impl Send for Arena {}
unsafe impl Sync for Arena {}

impl Arena {
    fn new(name: &str, slots: usize, value_size: usize, ncpus: usize, pool: Option<&mut Pool>) -> Result<Arena, String> {
        let elem = round8(value_size.max(1));
        let bytes = slots as u128 * elem as u128 * ncpus as u128;
        if let Some(p) = pool.and_then(|p| usize::try_from(bytes).ok().and_then(|b| p.take(b))) {
            return Ok(Arena { mem: p, _own: None, elem, slots, ncpus });
        }
        let own = Zeroed::new(bytes, &format!("map {name} ({slots} entries of {value_size} bytes)"))?;
        Ok(Arena { mem: own.mem, _own: Some(own), elem, slots, ncpus })
    }

    fn ptr(&self, slot: usize, cpu: usize) -> *mut u8 {
        unsafe { self.mem.add((cpu * self.slots + slot) * self.elem) }
    }

    fn bytes(&self, slot: usize, cpu: usize, len: usize) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr(slot, cpu), len) }
    }

    fn write(&self, slot: usize, cpu: usize, v: &[u8]) {
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), self.ptr(slot, cpu), v.len()) }
    }

    fn zero(&self, slot: usize, cpu: usize) {
        unsafe { std::ptr::write_bytes(self.ptr(slot, cpu), 0, self.elem) }
    }

    fn region(&self) -> (u64, u64) {
        let start = self.mem as u64;
        (start, start + (self.slots * self.elem * self.ncpus) as u64)
    }
}

/// Slot allocation for hash-like maps, with LRU order when asked.
/// Slots are handed out in order and reused when freed, so that a map of
/// 2^31 entries costs what its entries use.
pub struct Slots {
    /// Slot by key (an LPM trie's: the prefix length and the bits it covers).
    index: KeyMap<usize>,
    /// The key each slot holds, as last written (an LPM trie keeps the
    /// bytes beyond the prefix, as the kernel does).
    keys: Vec<Option<Vec<u8>>>,
    free: Vec<usize>,
    capacity: usize,
    lru: Option<VecDeque<usize>>,
}

impl Slots {
    fn new(n: usize, lru: bool) -> Slots {
        Slots { index: KeyMap::default(), keys: Vec::new(), free: Vec::new(), capacity: n, lru: lru.then(VecDeque::new) }
    }

    fn touch(&mut self, slot: usize) {
        if let Some(l) = &mut self.lru {
            // Lazy: the queue may hold stale entries; eviction skips them.
            l.push_back(slot);
            if l.len() > 4 * self.keys.len() + 16 {
                let live: Vec<usize> = l.iter().rev().copied().collect();
                let mut seen = vec![false; self.keys.len()];
                let mut keep = VecDeque::new();
                for s in live {
                    if !seen[s] && self.keys[s].is_some() {
                        seen[s] = true;
                        keep.push_front(s);
                    }
                }
                *l = keep;
            }
        }
    }

    /// A free slot, evicting the least recently used entry of an LRU map.
    fn alloc(&mut self) -> Option<usize> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        if self.keys.len() < self.capacity {
            self.keys.push(None);
            return Some(self.keys.len() - 1);
        }
        let lru = self.lru.as_mut()?;
        let mut counts: HashMap<usize, usize> = HashMap::new();
        for s in lru.iter() {
            *counts.entry(*s).or_default() += 1;
        }
        while let Some(s) = lru.pop_front() {
            let c = counts.get_mut(&s).unwrap();
            *c -= 1;
            if *c == 0 {
                if let Some(k) = self.keys[s].take() {
                    self.index.remove(&k);
                    return Some(s);
                }
            }
        }
        None
    }

    fn remove(&mut self, key: &[u8]) -> Option<usize> {
        let s = self.index.remove(key)?;
        self.keys[s] = None;
        self.free.push(s);
        Some(s)
    }
}

/// A map's storage. What changes besides value bytes (which keys exist,
/// LRU order, ring buffer records) sits behind a lock per map, so that
/// threads serving several queues share their maps.
pub enum Store {
    Array(Arena),
    Hash(Arena, Mutex<Slots>),
    Lpm { arena: Arena, slots: Mutex<Slots>, bits: u32, lens: Mutex<Vec<u32>> },
    /// Map-in-map, program array, devmap, cpumap, xskmap: small values
    /// (ids, indexes) kept by key.
    Refs(Mutex<HashMap<Vec<u8>, Vec<u8>>>),
    Ringbuf(Mutex<Ringbuf>),
}

pub struct Ringbuf {
    pub size: usize,
    used: usize,
    /// Where records are reserved: twice the ring's size, so that each is
    /// contiguous, as the kernel maps its ring twice.
    arena: Arena,
    /// The producer's position, in bytes.
    head: usize,
    /// Reserved, not yet submitted: pointer → (length, charged bytes).
    pending: HashMap<u64, (usize, usize)>,
    pub records: VecDeque<Vec<u8>>,
    charged: VecDeque<usize>,
}

impl Ringbuf {
    fn charge(len: usize) -> usize {
        8 + round8(len)
    }

    /// The memory reserved records lie in.
    pub fn region(&self) -> (u64, u64) {
        self.arena.region()
    }

    pub fn reserve(&mut self, len: usize) -> Option<u64> {
        let c = Self::charge(len);
        if len == 0 || self.used + c > self.size {
            return None;
        }
        self.used += c;
        // After an 8-byte header, as in the kernel's ring.
        let p = unsafe { self.arena.mem.add(self.head % self.size + 8) };
        self.head += c;
        unsafe { std::ptr::write_bytes(p, 0, len) };
        self.pending.insert(p as u64, (len, c));
        Some(p as u64)
    }

    pub fn pending_region(&self, addr: u64, len: u64) -> bool {
        self.pending.iter().any(|(&p, &(n, _))| addr >= p && addr + len <= p + n as u64)
    }

    pub fn submit(&mut self, p: u64, discard: bool) -> bool {
        match self.pending.remove(&p) {
            Some((n, c)) => {
                if discard {
                    self.used -= c;
                } else {
                    self.records.push_back(unsafe { std::slice::from_raw_parts(p as *const u8, n) }.to_vec());
                    self.charged.push_back(c);
                }
                true
            }
            None => false,
        }
    }

    pub fn output(&mut self, data: &[u8]) -> bool {
        match self.reserve(data.len()) {
            Some(p) => {
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p as *mut u8, data.len()) };
                self.submit(p, false)
            }
            None => false,
        }
    }

    /// Takes the submitted records, as a consumer would.
    pub fn drain(&mut self) -> Vec<Vec<u8>> {
        self.used -= self.charged.drain(..).sum::<usize>();
        self.records.drain(..).collect()
    }
}

pub struct Map {
    pub def: MapDef,
    pub store: Store,
    pub ncpus: usize,
}

impl Map {
    pub fn new(def: &MapDef, ncpus: usize) -> Result<Map, String> {
        Self::new_in(def, ncpus, None)
    }

    /// A map whose values come from the pool when they fit (read-only
    /// data never does: its writes must fail the check).
    pub fn new_in(def: &MapDef, ncpus: usize, pool: Option<&mut Pool>) -> Result<Map, String> {
        let pool = if def.readonly { None } else { pool };
        let n = def.max_entries as usize;
        let vs = def.value_size as usize;
        let percpu = matches!(def.map_type, mt::PERCPU_ARRAY | mt::PERCPU_HASH | mt::LRU_PERCPU_HASH);
        let cpus = if percpu { ncpus } else { 1 };
        if n == 0 && def.map_type != mt::RINGBUF {
            return Err(format!("map {}: max_entries is 0", def.name));
        }
        let store = match def.map_type {
            mt::ARRAY | mt::PERCPU_ARRAY => {
                let a = Arena::new(&def.name, n, vs, cpus, pool)?;
                if let Some(d) = &def.data {
                    a.write(0, 0, d);
                }
                Store::Array(a)
            }
            mt::HASH | mt::PERCPU_HASH | mt::LRU_HASH | mt::LRU_PERCPU_HASH => {
                let lru = matches!(def.map_type, mt::LRU_HASH | mt::LRU_PERCPU_HASH);
                Store::Hash(Arena::new(&def.name, n, vs, cpus, pool)?, Mutex::new(Slots::new(n, lru)))
            }
            mt::LPM_TRIE => {
                if def.key_size < 5 || def.flags & 1 == 0 {
                    return Err(format!("map {}: an LPM trie needs a key of 4 + data bytes and BPF_F_NO_PREALLOC", def.name));
                }
                let bits = (def.key_size - 4) * 8;
                Store::Lpm { arena: Arena::new(&def.name, n, vs, 1, pool)?, slots: Mutex::new(Slots::new(n, false)), bits, lens: Mutex::new(vec![0; bits as usize + 1]) }
            }
            mt::ARRAY_OF_MAPS | mt::HASH_OF_MAPS | mt::PROG_ARRAY | mt::DEVMAP | mt::DEVMAP_HASH | mt::CPUMAP | mt::XSKMAP => {
                Store::Refs(Mutex::new(HashMap::new()))
            }
            mt::RINGBUF => {
                if n == 0 || !n.is_power_of_two() || n % 4096 != 0 {
                    return Err(format!("map {}: a ring buffer's size must be a power of two and a multiple of the page size", def.name));
                }
                let arena = Arena::new(&def.name, 2, n, 1, pool)?;
                Store::Ringbuf(Mutex::new(Ringbuf { size: n, used: 0, arena, head: 0, pending: HashMap::new(), records: VecDeque::new(), charged: VecDeque::new() }))
            }
            t => return Err(format!("map {}: type {t} ({}) is not supported", def.name, mt::name(t))),
        };
        Ok(Map { def: def.clone(), store, ncpus })
    }

    pub fn percpu(&self) -> bool {
        matches!(self.def.map_type, mt::PERCPU_ARRAY | mt::PERCPU_HASH | mt::LRU_PERCPU_HASH)
    }

    fn cpu(&self, cpu: usize) -> usize {
        if self.percpu() { cpu } else { 0 }
    }

    /// The memory programs may touch through this map's value pointers.
    pub fn region(&self) -> Option<(u64, u64)> {
        match &self.store {
            Store::Array(a) | Store::Hash(a, _) | Store::Lpm { arena: a, .. } => Some(a.region()),
            _ => None,
        }
    }

    /// An array's layout for compiled lookups: values' base, element
    /// stride, number of elements and bytes per CPU.
    pub fn array_layout(&self) -> Option<(u64, usize, usize, usize)> {
        match &self.store {
            Store::Array(a) => Some((a.mem as u64, a.elem, a.slots, a.slots * a.elem)),
            _ => None,
        }
    }

    fn array_index(&self, key: &[u8]) -> Option<usize> {
        let i = u32::from_le_bytes(key.get(..4)?.try_into().ok()?) as usize;
        (i < self.def.max_entries as usize).then_some(i)
    }

    /// bpf_map_lookup_elem from a program: a value pointer, or a map handle
    /// for map-in-map.
    pub fn lookup(&self, key: &[u8], cpu: usize) -> Option<u64> {
        let c = self.cpu(cpu);
        match &self.store {
            Store::Array(a) => {
                let i = u32::from_le_bytes(key[..4].try_into().ok()?) as usize;
                (i < a.slots).then(|| a.ptr(i, c) as u64)
            }
            Store::Hash(a, s) => {
                let mut s = s.lock().unwrap();
                let slot = *s.index.get(key)?;
                s.touch(slot);
                Some(a.ptr(slot, c) as u64)
            }
            Store::Lpm { arena, slots, bits, lens } => {
                let slots = slots.lock().unwrap();
                let lens = lens.lock().unwrap();
                let plen = u32::from_le_bytes(key[..4].try_into().ok()?).min(*bits);
                let data = &key[4..4 + (*bits as usize / 8)];
                // Only the prefix lengths the trie holds, longest first.
                let mut k = [0u8; 4 + 256];
                for l in (0..=plen).rev().filter(|&l| lens[l as usize] > 0) {
                    let n = lpm_key_into(l, data, &mut k);
                    if let Some(&slot) = slots.index.get(&k[..n]) {
                        return Some(arena.ptr(slot, 0) as u64);
                    }
                }
                None
            }
            Store::Refs(m) => {
                let m = m.lock().unwrap();
                let v = m.get(key)?;
                if matches!(self.def.map_type, mt::ARRAY_OF_MAPS | mt::HASH_OF_MAPS) {
                    Some(handle(u32::from_le_bytes(v[..4].try_into().ok()?) as usize))
                } else {
                    None // programs may not look these up directly
                }
            }
            Store::Ringbuf(_) => None,
        }
    }

    /// bpf_map_update_elem: 0 or a negative errno, as the kernel returns.
    pub fn update(&self, key: &[u8], value: &[u8], flags: u64, cpu: Option<usize>) -> i64 {
        if flags > BPF_EXIST {
            return -EINVAL;
        }
        let vs = self.def.value_size as usize;
        let ncpus = self.ncpus;
        let percpu = self.percpu();
        let need = if percpu && cpu.is_none() { round8(vs) * (ncpus - 1) + vs } else { vs };
        if value.len() < need || key.len() < self.def.key_size as usize {
            return -EINVAL;
        }
        // From userspace a per-CPU value holds every CPU's; a program writes its own.
        let write = |a: &Arena, slot: usize| match (percpu, cpu) {
            (true, None) => {
                let stride = round8(vs);
                for c in 0..ncpus {
                    a.write(slot, c, &value[c * stride..c * stride + vs]);
                }
            }
            (true, Some(c)) => a.write(slot, c, &value[..vs]),
            _ => a.write(slot, 0, &value[..vs]),
        };
        match &self.store {
            Store::Array(a) => {
                let i = u32::from_le_bytes(key[..4].try_into().unwrap()) as usize;
                if i >= a.slots {
                    return -E2BIG;
                }
                if flags == BPF_NOEXIST {
                    return -EEXIST;
                }
                write(a, i);
                0
            }
            Store::Hash(a, s) => {
                let mut s = s.lock().unwrap();
                let exists = s.index.get(key).copied();
                match (exists, flags) {
                    (Some(_), BPF_NOEXIST) => return -EEXIST,
                    (None, BPF_EXIST) => return -ENOENT,
                    _ => {}
                }
                let slot = match exists {
                    Some(slot) => slot,
                    None => {
                        let Some(slot) = s.alloc() else { return -E2BIG };
                        s.index.insert(key.to_vec(), slot);
                        s.keys[slot] = Some(key.to_vec());
                        for c in 0..a.ncpus {
                            a.zero(slot, c);
                        }
                        slot
                    }
                };
                s.touch(slot);
                write(a, slot);
                0
            }
            Store::Lpm { arena, slots, bits, lens } => {
                let mut slots = slots.lock().unwrap();
                let plen = u32::from_le_bytes(key[..4].try_into().unwrap());
                if plen > *bits {
                    return -EINVAL;
                }
                let k = lpm_key(plen, &key[4..]);
                let exists = slots.index.get(&k).copied();
                match (exists, flags) {
                    (Some(_), BPF_NOEXIST) => return -EEXIST,
                    (None, BPF_EXIST) => return -ENOENT,
                    _ => {}
                }
                let slot = match exists {
                    Some(s) => s,
                    None => {
                        let Some(s) = slots.alloc() else { return -ENOSPC };
                        slots.index.insert(k, s);
                        lens.lock().unwrap()[plen as usize] += 1;
                        s
                    }
                };
                // The kernel replaces the node: its key bytes are this update's.
                slots.keys[slot] = Some(key[..self.def.key_size as usize].to_vec());
                arena.write(slot, 0, &value[..vs]);
                0
            }
            Store::Refs(m) => {
                let mut m = m.lock().unwrap();
                if self.def.map_type != mt::DEVMAP_HASH && self.def.map_type != mt::HASH_OF_MAPS {
                    let i = u32::from_le_bytes(key[..4].try_into().unwrap());
                    if i >= self.def.max_entries {
                        return -E2BIG;
                    }
                } else if !m.contains_key(key) && m.len() >= self.def.max_entries as usize {
                    return -E2BIG;
                }
                match (m.contains_key(key), flags) {
                    (true, BPF_NOEXIST) => return -EEXIST,
                    (false, BPF_EXIST) => return -ENOENT,
                    _ => {}
                }
                m.insert(key.to_vec(), value[..vs.min(value.len())].to_vec());
                0
            }
            Store::Ringbuf(_) => -EINVAL,
        }
    }

    pub fn delete(&self, key: &[u8]) -> i64 {
        match &self.store {
            Store::Array(_) => -EINVAL,
            Store::Hash(_, s) => {
                if s.lock().unwrap().remove(key).is_some() { 0 } else { -ENOENT }
            }
            Store::Lpm { slots, bits, lens, .. } => {
                let mut slots = slots.lock().unwrap();
                let plen = u32::from_le_bytes(key[..4].try_into().unwrap());
                if plen > *bits {
                    return -EINVAL;
                }
                if slots.remove(&lpm_key(plen, &key[4..])).is_some() {
                    lens.lock().unwrap()[plen as usize] -= 1;
                    0
                } else {
                    -ENOENT
                }
            }
            Store::Refs(m) => {
                if m.lock().unwrap().remove(key).is_some() { 0 } else { -ENOENT }
            }
            Store::Ringbuf(_) => -EINVAL,
        }
    }

    /// The first four bytes of a device, CPU or socket map's entry (a
    /// devmap's ifindex), without copying the value.
    pub fn ref_u32(&self, key: &[u8]) -> Option<u32> {
        match &self.store {
            Store::Refs(m) => m.lock().unwrap().get(key).and_then(|v| Some(u32::from_le_bytes(v.get(..4)?.try_into().ok()?))),
            _ => None,
        }
    }

    /// A value as userspace reads it: every CPU's for per-CPU maps.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let vs = self.def.value_size as usize;
        let cpus = if self.percpu() { self.ncpus } else { 1 };
        let read = |a: &Arena, slot: usize| {
            let mut out = Vec::new();
            for c in 0..cpus {
                out.extend_from_slice(a.bytes(slot, c, vs));
                if self.percpu() {
                    out.resize(round8(out.len()), 0);
                }
            }
            out
        };
        match &self.store {
            Store::Array(a) => self.array_index(key).map(|i| read(a, i)),
            Store::Hash(a, s) => s.lock().unwrap().index.get(key).map(|&slot| read(a, slot)),
            Store::Lpm { arena, slots, bits, .. } => {
                let plen = u32::from_le_bytes(key.get(..4)?.try_into().ok()?);
                if plen > *bits {
                    return None;
                }
                slots.lock().unwrap().index.get(&lpm_key(plen, &key[4..])).map(|&s| read(arena, s))
            }
            Store::Refs(m) => m.lock().unwrap().get(key).cloned(),
            Store::Ringbuf(_) => None,
        }
    }

    /// Every entry, keys sorted: for dumps and comparisons.
    pub fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut keys: Vec<Vec<u8>> = match &self.store {
            Store::Array(a) => (0..a.slots as u32).map(|i| i.to_le_bytes().to_vec()).collect(),
            Store::Hash(_, s) | Store::Lpm { slots: s, .. } => s.lock().unwrap().keys.iter().flatten().cloned().collect(),
            Store::Refs(m) => m.lock().unwrap().keys().cloned().collect(),
            Store::Ringbuf(_) => Vec::new(),
        };
        keys.sort();
        keys.into_iter().filter_map(|k| self.get(&k).map(|v| (k, v))).collect()
    }

    pub fn ringbuf(&self) -> Option<MutexGuard<'_, Ringbuf>> {
        match &self.store {
            Store::Ringbuf(r) => Some(r.lock().unwrap()),
            _ => None,
        }
    }
}

/// lpm_key into a buffer; returns its length.
fn lpm_key_into(plen: u32, data: &[u8], out: &mut [u8]) -> usize {
    out[..4].copy_from_slice(&plen.to_le_bytes());
    for (i, &b) in data.iter().enumerate() {
        let bit = i as u32 * 8;
        out[4 + i] = if bit + 8 <= plen { b } else if bit >= plen { 0 } else { b & (0xffu8 << (8 - (plen - bit))) };
    }
    4 + data.len()
}

/// An LPM entry's identity: its length and the data bits it covers.
fn lpm_key(plen: u32, data: &[u8]) -> Vec<u8> {
    let mut k = plen.to_le_bytes().to_vec();
    for (i, &b) in data.iter().enumerate() {
        let bit = i as u32 * 8;
        let m = if bit + 8 <= plen { 0xff } else if bit >= plen { 0 } else { 0xffu8 << (8 - (plen - bit)) };
        k.push(b & m);
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(t: u32, k: u32, v: u32, n: u32, flags: u32) -> MapDef {
        let mut d = MapDef::new("t", t, k, v, n);
        d.flags = flags;
        d
    }

    #[test]
    fn hash_flags_and_full() {
        let m = Map::new(&def(mt::HASH, 4, 8, 2, 0), 1).unwrap();
        assert_eq!(m.update(&1u32.to_le_bytes(), &[1; 8], BPF_EXIST, None), -ENOENT);
        assert_eq!(m.update(&1u32.to_le_bytes(), &[1; 8], BPF_NOEXIST, None), 0);
        assert_eq!(m.update(&1u32.to_le_bytes(), &[2; 8], BPF_NOEXIST, None), -EEXIST);
        assert_eq!(m.update(&2u32.to_le_bytes(), &[2; 8], BPF_ANY, None), 0);
        assert_eq!(m.update(&3u32.to_le_bytes(), &[3; 8], BPF_ANY, None), -E2BIG);
        assert_eq!(m.update(&3u32.to_le_bytes(), &[3; 8], 7, None), -EINVAL);
        assert_eq!(m.delete(&2u32.to_le_bytes()), 0);
        assert_eq!(m.delete(&2u32.to_le_bytes()), -ENOENT);
        assert_eq!(m.update(&3u32.to_le_bytes(), &[3; 8], BPF_ANY, None), 0);
    }

    #[test]
    fn lru_evicts_least_recent() {
        let m = Map::new(&def(mt::LRU_HASH, 4, 8, 2, 0), 1).unwrap();
        m.update(&1u32.to_le_bytes(), &[1; 8], BPF_ANY, None);
        m.update(&2u32.to_le_bytes(), &[2; 8], BPF_ANY, None);
        m.lookup(&1u32.to_le_bytes(), 0);
        assert_eq!(m.update(&3u32.to_le_bytes(), &[3; 8], BPF_ANY, None), 0);
        assert!(m.get(&2u32.to_le_bytes()).is_none());
        assert!(m.get(&1u32.to_le_bytes()).is_some());
    }

    #[test]
    fn lpm_longest_match() {
        let m = Map::new(&def(mt::LPM_TRIE, 8, 4, 8, 1), 1).unwrap();
        let key = |l: u32, a: [u8; 4]| [l.to_le_bytes().as_slice(), &a].concat();
        assert_eq!(m.update(&key(8, [10, 0, 0, 0]), &1u32.to_le_bytes(), BPF_ANY, None), 0);
        assert_eq!(m.update(&key(24, [10, 1, 2, 0]), &2u32.to_le_bytes(), BPF_ANY, None), 0);
        assert_eq!(m.update(&key(33, [10, 1, 2, 0]), &2u32.to_le_bytes(), BPF_ANY, None), -EINVAL);
        let v = |m: &Map, a| m.lookup(&key(32, a), 0).map(|p| unsafe { *(p as *const u32) });
        assert_eq!(v(&m, [10, 1, 2, 3]), Some(2));
        assert_eq!(v(&m, [10, 1, 3, 3]), Some(1));
        assert_eq!(v(&m, [11, 1, 2, 3]), None);
    }

    #[test]
    fn array_semantics() {
        let m = Map::new(&def(mt::ARRAY, 4, 4, 4, 0), 1).unwrap();
        assert_eq!(m.update(&4u32.to_le_bytes(), &[0; 4], BPF_ANY, None), -E2BIG);
        assert_eq!(m.update(&1u32.to_le_bytes(), &[0; 4], BPF_NOEXIST, None), -EEXIST);
        assert_eq!(m.delete(&1u32.to_le_bytes()), -EINVAL);
        assert!(m.lookup(&4u32.to_le_bytes(), 0).is_none());
    }

    #[test]
    fn ringbuf_space() {
        let m = Map::new(&def(mt::RINGBUF, 0, 0, 4096, 0), 1).unwrap();
        let mut r = m.ringbuf().unwrap();
        let mut n = 0;
        while r.output(&[7; 100]) {
            n += 1;
        }
        assert_eq!(n, 4096 / (8 + 104));
        assert_eq!(r.drain().len(), n);
        assert!(r.output(&[1; 100]));
    }
}
