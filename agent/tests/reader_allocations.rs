//! Issue 19: the capture reader hands packets to the analyzer without
//! allocating per packet. A counting global allocator counts what the
//! reader allocates while it reads every bundled capture, plain (memory-
//! mapped) and gzip (streamed through its buffer), after opening it.
//! `cargo run --release -p tlsrum --example reader_allocations FILE`
//! measures a large capture, with and without the analyzer behind it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tlsrum::source::{pcap_file::PcapFile, Captured, Source, Status};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Reads the whole source; (packets, bytes, allocations while reading).
fn read_all(mut source: PcapFile) -> (u64, u64, u64) {
    let mut bytes = 0u64;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    loop {
        let status = source
            .poll(Duration::ZERO, &mut |c| {
                if let Captured::Frame { data, .. } = c {
                    bytes += data.len() as u64;
                }
            })
            .unwrap();
        if status == Status::Ended {
            break;
        }
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    (source.packets(), bytes, allocations)
}

#[test]
fn reading_a_capture_allocates_nothing_per_packet() {
    let dir = std::env::temp_dir().join(format!("tlsrum-reader-alloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut captures: Vec<PathBuf> = std::fs::read_dir(repo().join("pcaps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    captures.sort();
    assert!(captures.len() > 10, "pcaps/ holds the bundled captures");
    let (mut packets, mut allocations) = (0, 0);
    for cap in &captures {
        let plain = read_all(PcapFile::open(cap, None).unwrap());
        // The same capture gzip-compressed: read through the stream buffer.
        let gz = dir.join("c.pcap.gz");
        let mut enc = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::fast(),
        );
        std::io::copy(&mut std::fs::File::open(cap).unwrap(), &mut enc).unwrap();
        enc.finish().unwrap();
        let streamed = read_all(PcapFile::open(&gz, None).unwrap());
        assert_eq!(plain.0, streamed.0, "{}: packets", cap.display());
        assert_eq!(plain.1, streamed.1, "{}: bytes", cap.display());
        assert!(plain.0 > 0, "{}", cap.display());
        // Per file: the pcapng headers' options (a few blocks), never one
        // per packet.
        assert!(
            plain.2 <= 8 && streamed.2 <= 8,
            "{}: {} allocations (mapped) and {} (streamed) for {} packets",
            cap.display(),
            plain.2,
            streamed.2,
            plain.0
        );
        packets += plain.0;
        allocations += plain.2;
    }
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!(
        "{} captures, {packets} packets, {allocations} allocations while reading them mapped",
        captures.len()
    );
}
