//! A `tlsrum live` agent's kernel flow map, seen from outside: found
//! through the agent's file descriptors, read with bpftool.

use serde_json::Value;

use super::procs::run;

/// The id of the agent's kernel flow map (the LRU hash with 40-byte keys),
/// from its file descriptors' fdinfo.
pub fn flow_map_id(pid: u32) -> u32 {
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let fd = fd.unwrap();
        let link = std::fs::read_link(fd.path()).unwrap_or_default();
        if link.to_string_lossy() != "anon_inode:bpf-map" {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        if field("map_type:").as_deref() == Some("9") && field("key_size:").as_deref() == Some("40")
        {
            return field("map_id:").unwrap().parse().unwrap();
        }
    }
    panic!("agent {pid} has no flow map");
}

/// Every entry of the map (`bpftool -j map dump`): "key" and "value" are
/// arrays of bytes as "0x.." strings.
pub fn flow_map_entries(id: u32) -> Vec<Value> {
    let dump = run(&["bpftool", "-j", "map", "dump", "id", &id.to_string()]);
    serde_json::from_str(&dump).expect("bpftool JSON")
}

/// Byte `i` of an entry's "key" or "value" array.
pub fn byte(array: &Value, i: usize) -> u8 {
    let b = array[i].as_str().unwrap_or("0x0");
    u8::from_str_radix(b.trim_start_matches("0x"), 16).unwrap()
}

/// The two ports of an entry's key (`struct tlsrum_flow_key`: port_a at 32,
/// port_b at 34, host byte order).
pub fn ports(entry: &Value) -> (u16, u16) {
    let k = &entry["key"];
    (
        u16::from_ne_bytes([byte(k, 32), byte(k, 33)]),
        u16::from_ne_bytes([byte(k, 34), byte(k, 35)]),
    )
}
