//! The maps file `test-run --maps-in` reads (and the peer harness):
//! entries written before the first packet, as userspace writes them.

use crate::vm::Vm;

pub fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err(format!("hex {s:?} has an odd length"));
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("hex {s:?}: {e}"))).collect()
}

/// --maps-in: {"map": [["key hex", value], ...]}, written as userspace
/// writes maps (every CPU's value for per-CPU maps). A value is hex; in a
/// program array "prog:NAME"; in a map of maps an inner map,
/// {"max_entries": N, "entries": [...]}, made from the outer map's template.
pub fn fill_maps(vm: &mut Vm, path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let obj = v.as_object().ok_or_else(|| format!("{path}: expected an object of map names"))?;
    for (name, entries) in obj {
        let idx = vm.map_index(name).ok_or_else(|| format!("{path}: the object has no map {name:?}"))?;
        fill_map(vm, path, name, idx, entries)?;
    }
    vm.refresh_regions();
    Ok(())
}

fn fill_map(vm: &mut Vm, path: &str, name: &str, idx: usize, entries: &serde_json::Value) -> Result<(), String> {
    for e in entries.as_array().ok_or_else(|| format!("{path}: {name}: expected a list of [key, value]"))? {
        let kv = e.as_array().filter(|a| a.len() == 2).ok_or_else(|| format!("{path}: {name}: an entry is not [key, value]"))?;
        let k = unhex(kv[0].as_str().unwrap_or(""))?;
        let val = match &kv[1] {
            serde_json::Value::Object(inner) => {
                let template = vm.maps[idx].def.inner.clone().ok_or_else(|| format!("{path}: {name}: an inner map given for a map that holds none"))?;
                let mut def = (*template).clone();
                def.name = format!("{name}[{}]", kv[0].as_str().unwrap_or(""));
                if let Some(n) = inner.get("max_entries").and_then(|n| n.as_u64()) {
                    def.max_entries = n as u32;
                }
                // From the pool, where compiled code checks map values.
                let pool = std::sync::Arc::get_mut(&mut vm.pool).ok_or("maps are shared already")?;
                let m = crate::maps::Map::new_in(&def, vm.maps[idx].ncpus, Some(pool)).map_err(|e| format!("{path}: {name}: {e}"))?;
                let maps = std::sync::Arc::get_mut(&mut vm.maps).ok_or("maps are shared already")?;
                maps.push(m);
                let inner_idx = maps.len() - 1;
                fill_map(vm, path, &def.name, inner_idx, inner.get("entries").unwrap_or(&serde_json::Value::Array(vec![])))?;
                (inner_idx as u32).to_le_bytes().to_vec()
            }
            serde_json::Value::String(v) => match v.strip_prefix("prog:") {
                Some(p) => (vm.programs.iter().position(|q| q.name == p).ok_or_else(|| format!("{path}: {p}: no such program in the object"))? as u32).to_le_bytes().to_vec(),
                None => unhex(v)?,
            },
            _ => return Err(format!("{path}: {name}: a value is hex, \"prog:NAME\" or an inner map")),
        };
        let m = &vm.maps[idx];
        if k.len() != m.def.key_size as usize {
            return Err(format!("{path}: {name}: key of {} bytes, the map's are {}", k.len(), m.def.key_size));
        }
        let r = m.update(&k, &val, 0, None);
        if r != 0 {
            return Err(format!("{path}: {name}: update failed with error {}", -r));
        }
    }
    Ok(())
}

