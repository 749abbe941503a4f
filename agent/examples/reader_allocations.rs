//! Allocations per packet on the replay path, for a capture (issue 19):
//! the reader alone (packets borrowed from the mapped file or the stream
//! buffer), with how fast it reads, then the reader feeding the analyzer
//! (what the analyzer allocates per packet: flows, reassembly, records).
//!
//! cargo run --release -p tlsrum --example reader_allocations -- bench-data/big.pcap

use std::alloc::{GlobalAlloc, Layout, System};
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

fn main() -> anyhow::Result<()> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: reader_allocations CAPTURE"))?;
    let path = std::path::Path::new(&path);

    let mut source = PcapFile::open(path, None)?;
    let start = std::time::Instant::now();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut bytes = 0u64;
    while source.poll(Duration::ZERO, &mut |c| {
        if let Captured::Frame { data, .. } = c {
            bytes += data.len() as u64;
        }
    })? == Status::Open
    {}
    let reader = ALLOCATIONS.load(Ordering::Relaxed) - before;
    let seconds = start.elapsed().as_secs_f64();
    let packets = source.packets();
    println!(
        "reader alone:       {packets} packets, {bytes} bytes in {seconds:.3} s ({:.0} packets/s), \
         {reader} allocations = {:.6} per packet",
        packets as f64 / seconds,
        reader as f64 / packets.max(1) as f64
    );

    let mut source = PcapFile::open(path, None)?;
    let mut analyzer = analyzer::Analyzer::new(analyzer::Config::default());
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    while source.poll(Duration::ZERO, &mut |c| c.analyze(&mut analyzer))? == Status::Open {
        // Records are taken as replay takes them, after each batch.
        drop(analyzer.take_records());
    }
    analyzer.finish();
    drop(analyzer.take_records());
    let all = ALLOCATIONS.load(Ordering::Relaxed) - before;
    println!(
        "reader + analyzer:  {all} allocations = {:.3} per packet",
        all as f64 / packets.max(1) as f64
    );
    Ok(())
}
