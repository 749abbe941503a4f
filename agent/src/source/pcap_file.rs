//! A capture file (pcap or pcapng, plain or compressed with gzip or zstd,
//! as Wireshark reads them) as `replay` reads it: optionally filtered,
//! handed over in batches.
//!
//! A plain file is memory-mapped and a stream (compressed, a pipe,
//! standard input) read through a large buffer: packets are parsed where
//! they lie ([`super::capture_format`]) and handed to the analyzer
//! borrowed, with no `read()` and no allocation per packet. `--filter` is
//! compiled by libpcap and applied per packet as libpcap applies it to a
//! file, so every link type and expression works as with tcpdump.

use std::fs::File;
use std::io::{self, BufReader, IsTerminal, Read, Seek};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use analyzer::wire::LinkType;
use anyhow::{anyhow, bail, Context, Result};

use super::capture_format::{swap_nflog, Format, Frame, Step};
use super::{
    populate_next, prefetch, release_before, Captured, Mapping, Source, Status, POPULATE_CHUNK,
};

/// Packets handed over per poll: the caller writes the records out after
/// each batch, which bounds how many wait in memory.
pub const BATCH: u64 = 4096;

/// Cache lines of the next record asked for while this one is analyzed:
/// its header, the frame's headers and the start of its payload. The
/// first kilobyte of each record, rather than every line of the file
/// 8 KiB ahead: 1.03-1.06x on `big.pcap` at one thread (three sets of
/// 8-12 alternating rounds), the same on `hs.pcap` and at two threads
/// (bench/README.md, 1 Dec). With no prefetch at all replay took 1.16x
/// as long.
const NEXT_RECORD_LINES: usize = 16;

/// File name endings of captures, for directory scans: a capture
/// extension, optionally followed by a compression one.
const CAPTURE_EXTENSIONS: &[&str] = &["pcap", "pcapng", "cap"];
const COMPRESSED_EXTENSIONS: &[&str] = &["gz", "zst", "zstd"];

/// Whether a directory scan takes this file: `x.pcap`, `x.pcapng`, `x.cap`,
/// each also with `.gz`, `.zst` or `.zstd` after it.
pub fn is_capture_name(path: &Path) -> bool {
    let ext = |p: &Path| {
        p.extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
    };
    match ext(path) {
        Some(e) if CAPTURE_EXTENSIONS.contains(&e.as_str()) => true,
        Some(e) if COMPRESSED_EXTENSIONS.contains(&e.as_str()) => path
            .file_stem()
            .and_then(|stem| ext(Path::new(stem)))
            .is_some_and(|e| CAPTURE_EXTENSIONS.contains(&e.as_str())),
        _ => false,
    }
}

/// The file endings a directory scan takes, in words (for messages).
pub fn capture_names() -> String {
    format!(
        ".{}, each also compressed (.{})",
        CAPTURE_EXTENSIONS.join(", ."),
        COMPRESSED_EXTENSIONS.join(", .")
    )
}

/// The name standard input goes by in messages and records (`-` on the
/// command line), as grep names it.
pub const STDIN_NAME: &str = "(standard input)";

/// Whether a file a directory scan found, whatever its name, holds a
/// capture (pcap or pcapng, plain, gzip or zstd), by its first bytes;
/// if not, why it is skipped.
pub fn sniff(path: &Path) -> std::result::Result<(), String> {
    let not_capture = || "not pcap or pcapng (plain, gzip or zstd)".to_string();
    let mut file = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let mut head = [0u8; 6];
    let n = read_head(&mut file, &mut head).map_err(|e| format!("cannot read: {e}"))?;
    let kind = compression("", &head[..n]).map_err(|e| {
        let e = e.to_string();
        e.trim_start_matches(": ").to_string()
    })?;
    let stream = io::Cursor::new(head).take(n as u64).chain(file);
    let mut inner: Box<dyn Read> = match kind {
        Compression::None => Box::new(stream),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(stream)),
        Compression::Zstd => {
            Box::new(zstd::stream::read::Decoder::new(stream).map_err(|_| not_capture())?)
        }
    };
    let mut magic = [0u8; 4];
    let n = read_head(&mut inner, &mut magic).map_err(|_| not_capture())?;
    if is_capture_magic(&magic[..n]) {
        Ok(())
    } else {
        Err(not_capture())
    }
}

/// How a file is compressed, by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    fn name(self) -> &'static str {
        match self {
            Compression::None => "plain",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }
}

fn compression(name: &str, head: &[u8]) -> Result<Compression> {
    let other = |what: &str, how: &str| {
        anyhow!(
            "{name}: compressed with {what}, which tlsrum does not read (gzip and zstd it does): decompress it first ({how})"
        )
    };
    Ok(match head {
        [0x1f, 0x8b, ..] => Compression::Gzip,
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => return Err(other("xz", "xz -d")),
        [b'B', b'Z', b'h', ..] => return Err(other("bzip2", "bunzip2")),
        [0x04, 0x22, 0x4d, 0x18, ..] => return Err(other("lz4", "lz4 -d")),
        _ => Compression::None,
    })
}

/// The first bytes of a pcap (either byte order, micro- or nanosecond)
/// or pcapng (Section Header Block) file.
fn is_capture_magic(head: &[u8]) -> bool {
    matches!(
        head,
        [0xa1, 0xb2, 0xc3, 0xd4, ..]
            | [0xd4, 0xc3, 0xb2, 0xa1, ..]
            | [0xa1, 0xb2, 0x3c, 0x4d, ..]
            | [0x4d, 0x3c, 0xb2, 0xa1, ..]
            | [0x0a, 0x0d, 0x0d, 0x0a, ..]
    )
}

/// Reads up to `buf.len()` bytes (fewer only at the end of the stream).
fn read_head(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The first bytes of a text log tlsrum reads (a Zeek ssl.log, TSV or
/// JSON): `#` or `{` after any blank.
pub fn is_text_log(head: &[u8]) -> bool {
    matches!(
        head.iter().find(|b| !b.is_ascii_whitespace()),
        Some(b'#' | b'{')
    )
}

/// An input opened, told by its first bytes (decompressed): a capture, or
/// a text log (its bytes from the start, decompressed).
pub enum Opened {
    Capture(Box<PcapFile>),
    Text(Box<dyn Read + Send>),
}

/// Bytes a stream is read in at a time (and the buffer's starting size;
/// it grows for a larger record): few syscalls, and the packets are
/// parsed where they lie.
const STREAM_BUFFER: usize = 1 << 20;

/// Where a capture's bytes are: a plain file is memory-mapped (the kernel
/// reads it ahead as it is touched, with no copy and no `read()` per
/// packet); other streams (compressed, pipes, standard input) are read
/// into a large buffer that packets are borrowed from.
enum Bytes {
    Map(Arc<memmap2::Mmap>),
    Stream {
        buf: Vec<u8>,
        /// `buf[..end]` holds bytes read.
        end: usize,
        input: Box<dyn Read + Send>,
        /// No more bytes will come (the end, or `failed`).
        done: bool,
        /// Why the stream could not be read to its end: said once the
        /// packets read before it are handed over.
        failed: Option<io::Error>,
        kind: Compression,
    },
}

impl Bytes {
    fn stream(input: Box<dyn Read + Send>, kind: Compression) -> Self {
        Bytes::Stream {
            buf: vec![0; STREAM_BUFFER],
            end: 0,
            input,
            done: false,
            failed: None,
            kind,
        }
    }

    /// The bytes from `pos` on that are at hand.
    fn from(&self, pos: usize) -> &[u8] {
        match self {
            Bytes::Map(m) => &m[pos.min(m.len())..],
            Bytes::Stream { buf, end, .. } => &buf[pos..*end],
        }
    }

    /// A stream whose first bytes are a text log's, as a reader of its
    /// bytes from the start; anything else back as it was.
    fn into_text_log(mut self) -> std::result::Result<Box<dyn Read + Send>, Self> {
        let mut pos = 0;
        self.fill(&mut pos, 4);
        match self {
            Bytes::Stream {
                buf, end, input, ..
            } if !is_capture_magic(&buf[..end]) && is_text_log(&buf[..end]) => {
                let mut buf = buf;
                buf.truncate(end);
                Ok(Box::new(io::Cursor::new(buf).chain(input)))
            }
            other => Err(other),
        }
    }

    /// Whether no more bytes can come than those at hand.
    fn done(&self) -> bool {
        match self {
            Bytes::Map(_) => true,
            Bytes::Stream { done, .. } => *done,
        }
    }

    /// Reads until `need` bytes from `*pos` are at hand or the stream
    /// ends; moves what is unread to the buffer's start first (`*pos`
    /// becomes 0).
    fn fill(&mut self, pos: &mut usize, need: usize) {
        let Bytes::Stream {
            buf,
            end,
            input,
            done,
            failed,
            ..
        } = self
        else {
            return;
        };
        if *pos > 0 {
            buf.copy_within(*pos..*end, 0);
            *end -= *pos;
            *pos = 0;
        }
        if buf.len() < need {
            buf.resize(need, 0);
        }
        while *end < need && !*done {
            match input.read(&mut buf[*end..]) {
                Ok(0) => *done = true,
                Ok(k) => *end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    *failed = Some(e);
                    *done = true;
                }
            }
        }
    }
}

/// Bytes a decompressing thread hands over at a time.
const CHUNK: usize = 256 * 1024;

/// A compressed stream, decompressed on a thread of its own (a second
/// core, as when libpcap read it from a pipe) and handed over in chunks;
/// the chunks go back to be filled again, so none is allocated per read.
struct Decompressing {
    chunks: mpsc::Receiver<io::Result<(Vec<u8>, usize)>>,
    spare: mpsc::SyncSender<Vec<u8>>,
    /// The chunk being read, its length and how far it was read.
    chunk: Vec<u8>,
    len: usize,
    at: usize,
}

impl Decompressing {
    fn spawn(mut input: Box<dyn Read + Send>) -> io::Result<Self> {
        let (tx, chunks) = mpsc::sync_channel(2);
        let (spare, spares) = mpsc::sync_channel::<Vec<u8>>(4);
        std::thread::Builder::new()
            .name("tlsrum-decompress".into())
            .spawn(move || loop {
                let mut buf = spares.try_recv().unwrap_or_else(|_| vec![0; CHUNK]);
                let mut n = 0;
                // Full chunks, fewer hand-overs; a short one only at the end.
                while n < CHUNK {
                    match input.read(&mut buf[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            // What was read before the error comes first.
                            if n > 0 {
                                let _ = tx.send(Ok((buf, n)));
                            }
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
                // Ends when the stream does, or when the reader is gone.
                if n == 0 || tx.send(Ok((buf, n))).is_err() {
                    return;
                }
            })?;
        Ok(Decompressing {
            chunks,
            spare,
            chunk: Vec::new(),
            len: 0,
            at: 0,
        })
    }
}

impl Read for Decompressing {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.len {
            let Ok(next) = self.chunks.recv() else {
                return Ok(0);
            };
            let (chunk, len) = next?;
            let used = std::mem::replace(&mut self.chunk, chunk);
            if !used.is_empty() {
                let _ = self.spare.try_send(used);
            }
            (self.len, self.at) = (len, 0);
        }
        let n = out.len().min(self.len - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// `--filter`: the BPF program libpcap compiles from the expression, one
/// per link type met, applied to each packet as libpcap applies it to a
/// file it reads (`pcap_offline_filter`, with the wire length).
struct Filter {
    expr: String,
    programs: Vec<(i32, pcap::BpfProgram)>,
}

/// libpcap's per-packet header, as `pcap_offline_filter` takes it.
#[repr(C)]
struct PktHdr {
    ts: libc::timeval,
    caplen: u32,
    len: u32,
}

#[link(name = "pcap")]
extern "C" {
    /// `prog` is a `struct bpf_program` (`pcap::BpfProgram` is one,
    /// `repr(transparent)`).
    fn pcap_offline_filter(
        prog: *const std::ffi::c_void,
        h: *const PktHdr,
        pkt: *const u8,
    ) -> libc::c_int;
}

impl Filter {
    fn new(expr: &str) -> Self {
        Filter {
            expr: expr.to_string(),
            programs: Vec::new(),
        }
    }

    /// Compiles the expression for a link type, once.
    fn program(&mut self, dlt: i32) -> Result<&pcap::BpfProgram> {
        let at = match self.programs.iter().position(|(d, _)| *d == dlt) {
            Some(at) => at,
            None => {
                let program = pcap::Capture::dead(pcap::Linktype(dlt))
                    .and_then(|c| c.compile(&self.expr, true))?;
                self.programs.push((dlt, program));
                self.programs.len() - 1
            }
        };
        Ok(&self.programs[at].1)
    }

    fn accepts(&mut self, frame: &Frame<'_>, data: &[u8]) -> Result<bool> {
        let program = self.program(frame.dlt)?;
        let h = PktHdr {
            ts: libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            caplen: data.len() as u32,
            len: frame.len,
        };
        // SAFETY: the program is a compiled `struct bpf_program` that lives
        // as long as `self`; `data` holds `h.caplen` bytes.
        let verdict = unsafe {
            pcap_offline_filter(
                (program as *const pcap::BpfProgram).cast(),
                &h,
                data.as_ptr(),
            )
        };
        Ok(verdict != 0)
    }
}

pub struct PcapFile {
    /// The path as the user gave it, for messages.
    name: String,
    bytes: Bytes,
    /// Where the next record starts in `bytes`.
    pos: usize,
    /// A mapped file's bytes before this were given back (see `release`);
    /// shared with whoever holds the mapping ([`Mapping::released`]).
    released: Arc<AtomicUsize>,
    /// Set once the mapping is shared: no page from here on is given back.
    keep: Option<Arc<AtomicUsize>>,
    /// A mapped file's bytes before this are mapped in (see `fetch_ahead`);
    /// shared with whoever holds the mapping ([`Mapping::populated`]).
    populated: Arc<AtomicUsize>,
    format: Format,
    /// True once the file was read to its end (or failed).
    ended: bool,
    /// The first packets' link type (the file's, or its first interface's).
    link: LinkType,
    /// libpcap's name of the link type, for the message about an unknown one.
    link_name: String,
    /// The latest frame's DLT and its link type, which frames borrow
    /// ([`Captured::Frame`]): one file or interface gives many frames in a
    /// row.
    frame_link: (i32, LinkType),
    filter: Option<Filter>,
    /// A packet libpcap would have changed (NFLOG from a host of the other
    /// byte order) is changed here; reused, so no allocation per packet.
    scratch: Vec<u8>,
    packets: u64,
    /// Packets the capture cut short (caplen < len), and the longest such
    /// cut (the snap length, as the file shows it).
    cut: u64,
    cut_at: u32,
    /// Packets to read at most (`replay -c`); the rest are left unread.
    limit: Option<u64>,
}

impl PcapFile {
    /// Opens the file (decompressing gzip and zstd on the fly), reads its
    /// link type and sets the filter (a BPF expression, as tcpdump takes).
    /// The file is opened once, so a named pipe or `<(zcat x.gz)` works too.
    pub fn open(path: &Path, filter: Option<&str>) -> Result<Self> {
        let name = path.display().to_string();
        let file = File::open(path).with_context(|| format!("{name}: cannot open"))?;
        Self::from_file(name, file, filter)
    }

    /// Reads a capture from standard input (`-`), as a pipe from
    /// `tcpdump -w -` or a redirected file, plain or compressed.
    pub fn open_stdin(filter: Option<&str>) -> Result<Self> {
        let name = STDIN_NAME.to_string();
        let stdin = io::stdin();
        if stdin.is_terminal() {
            bail!("{name} is a terminal: pipe a capture into it (e.g. `tcpdump -w - | tlsrum replay -`)");
        }
        let fd = stdin
            .as_fd()
            .try_clone_to_owned()
            .with_context(|| format!("{name}: cannot open"))?;
        Self::from_file(name, File::from(fd), filter)
    }

    fn from_file(name: String, file: File, filter: Option<&str>) -> Result<Self> {
        match Self::open_any(name.clone(), file, filter)? {
            Opened::Capture(c) => Ok(*c),
            Opened::Text(_) => bail!("{name}: cannot open as pcap or pcapng: not a capture file"),
        }
    }

    /// Opens a file that is a capture or a text log (plain, gzip or zstd),
    /// told by its first bytes; the file is read once (a pipe works).
    pub fn open_input(path: Option<&Path>, filter: Option<&str>) -> Result<Opened> {
        match path {
            Some(p) => {
                let name = p.display().to_string();
                let file = File::open(p).with_context(|| format!("{name}: cannot open"))?;
                Self::open_any(name, file, filter)
            }
            None => {
                let name = STDIN_NAME.to_string();
                let stdin = io::stdin();
                if stdin.is_terminal() {
                    bail!("{name} is a terminal: pipe a capture into it (e.g. `tcpdump -w - | tlsrum replay -`)");
                }
                let fd = stdin
                    .as_fd()
                    .try_clone_to_owned()
                    .with_context(|| format!("{name}: cannot open"))?;
                Self::open_any(name, File::from(fd), filter)
            }
        }
    }

    /// [`open_input`](Self::open_input) of a file already open, unfiltered.
    pub fn open_input_file(name: String, file: File) -> Result<Opened> {
        Self::open_any(name, file, None)
    }

    fn open_any(name: String, mut file: File, filter: Option<&str>) -> Result<Opened> {
        let mut head = [0u8; 6];
        let n = read_head(&mut file, &mut head).with_context(|| format!("{name}: cannot read"))?;
        let kind = compression(&name, &head[..n])?;
        if kind == Compression::None && is_text_log(&head[..n]) {
            let text = io::Cursor::new(head).take(n as u64).chain(file);
            return Ok(Opened::Text(Box::new(text)));
        }
        if kind == Compression::None && !is_capture_magic(&head[..n]) {
            bail!(
                "{name}: cannot open as pcap or pcapng (nor as a Zeek ssl.log): not a capture file"
            );
        }
        // A plain regular file is mapped whole; other streams get back the
        // bytes read to recognise them.
        let mapped = (kind == Compression::None
            && file.metadata().is_ok_and(|m| m.is_file())
            && file.rewind().is_ok())
        .then(|| {
            // SAFETY: the map is read only; a file cut short while it is
            // read would fault (as with any reader that maps files).
            unsafe { memmap2::Mmap::map(&file) }.ok()
        })
        .flatten();
        let bytes = match mapped {
            Some(map) => {
                let _ = map.advise(memmap2::Advice::Sequential);
                Bytes::Map(Arc::new(map))
            }
            None => {
                let stream = io::Cursor::new(head).take(n as u64).chain(file);
                let stream: Box<dyn Read + Send> = match kind {
                    Compression::None => Box::new(stream),
                    // Multi-member: `cat a.gz b.gz` is one gzip file.
                    Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(
                        BufReader::with_capacity(STREAM_BUFFER, stream),
                    )),
                    Compression::Zstd => Box::new(
                        zstd::stream::read::Decoder::new(stream)
                            .with_context(|| format!("{name}: cannot start reading it as zstd"))?,
                    ),
                };
                let stream = if kind == Compression::None {
                    stream
                } else {
                    Box::new(
                        Decompressing::spawn(stream)
                            .context("starting the thread that decompresses")?,
                    )
                };
                Bytes::stream(stream, kind)
            }
        };
        // A compressed text log: its decompressed bytes from the start.
        let bytes = match bytes.into_text_log() {
            Ok(text) => return Ok(Opened::Text(text)),
            Err(bytes) => bytes,
        };
        let mut source = PcapFile {
            name,
            bytes,
            pos: 0,
            released: Arc::new(AtomicUsize::new(0)),
            keep: None,
            populated: Arc::new(AtomicUsize::new(0)),
            // Replaced by the header's below.
            format: Format::Pcap(Default::default()),
            ended: false,
            link: LinkType::Unknown(0),
            link_name: String::new(),
            frame_link: (-1, LinkType::Unknown(u16::MAX)),
            filter: filter.map(Filter::new),
            scratch: Vec::new(),
            packets: 0,
            cut: 0,
            cut_at: 0,
            limit: None,
        };
        source.check_stream(kind)?;
        let dlt = source
            .read_header()
            .with_context(|| format!("{}: cannot open as pcap or pcapng", source.name))?;
        source.link = LinkType::from_number(dlt);
        source.link_name = pcap::Linktype(dlt)
            .get_name()
            .unwrap_or_else(|_| "unknown".into());
        if let (Some(f), Some(expr)) = (source.filter.as_mut(), filter) {
            f.program(dlt)
                .with_context(|| format!("{}: bad --filter expression {expr:?}", source.name))?;
        }
        Ok(Opened::Capture(Box::new(source)))
    }

    /// A compressed stream must hold a capture: its first bytes are
    /// checked before anything else is said about it.
    fn check_stream(&mut self, kind: Compression) -> Result<()> {
        if kind == Compression::None {
            return Ok(());
        }
        let what = kind.name();
        self.bytes.fill(&mut self.pos, 4);
        if let Bytes::Stream {
            failed: Some(e), ..
        } = &self.bytes
        {
            if self.bytes.from(0).len() < 4 {
                bail!("{}: cannot read the {what} stream: {e}", self.name);
            }
        }
        if !is_capture_magic(self.bytes.from(0)) {
            bail!(
                "{}: {what}-compressed, but what it holds is not pcap or pcapng",
                self.name
            );
        }
        Ok(())
    }

    /// Reads the file header, and a pcapng file's blocks up to its first
    /// interface: the first packets' link type (a DLT number).
    fn read_header(&mut self) -> Result<i32> {
        loop {
            match Format::open(self.bytes.from(self.pos)).map_err(|d| anyhow!(d))? {
                Some((format, n)) => {
                    self.format = format;
                    self.pos += n;
                    break;
                }
                None if self.bytes.done() => {
                    bail!(
                        "truncated dump file; tried to read 24 file header bytes, only got {}",
                        self.bytes.from(self.pos).len()
                    )
                }
                None => self.bytes.fill(&mut self.pos, 24),
            }
        }
        while self.format.first_dlt().is_none() {
            match self
                .format
                .next(self.bytes.from(self.pos))
                .map_err(|d| anyhow!(d))?
            {
                Step::Skip(n) => self.pos += n,
                Step::Need(_) if self.bytes.done() => {
                    bail!("the capture file has no Interface Description Blocks")
                }
                Step::Need(n) => self.bytes.fill(&mut self.pos, n),
                // A packet needs an interface (the format says so): never here.
                Step::Frame(..) => bail!("a packet before any interface"),
            }
        }
        Ok(self.format.first_dlt().unwrap_or_default())
    }

    /// Reads no more than `n` packets: the file ends there (`replay -c`).
    pub fn limit(&mut self, n: u64) {
        self.limit = Some(n);
    }

    /// The file's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Packets read so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// What to tell the user, once per file, when the capture cut packets
    /// short: their bytes past the snap length are missing.
    pub fn snaplen_note(&self) -> Option<String> {
        (self.cut > 0).then(|| {
            format!(
                "{}: {} of {} packets were cut short by the capture's snap length ({} bytes): \
                 handshake bytes past it are missing, so some records may be incomplete \
                 (truncated_segments in --stats); capture with `tcpdump -s 0` for whole packets",
                self.name, self.cut, self.packets, self.cut_at
            )
        })
    }

    /// Gives back the pages of a mapped file whose packets were handed
    /// over (the page cache keeps them): the process's resident memory is
    /// then the analyzer's, not the file's size.
    fn release(&mut self) {
        let Bytes::Map(map) = &self.bytes else {
            return;
        };
        let upto = match &self.keep {
            Some(keep) => self.pos.min(keep.load(Ordering::Acquire)),
            None => self.pos,
        };
        // Nothing borrows these bytes any more: the analyzer copies what
        // it keeps, and shards of a shared mapping are past `keep`.
        release_before(map, &self.released, upto);
    }

    /// Maps in a mapped file's next pages: page-table entries, a chunk at
    /// a time and a chunk ahead. A prefetch into a page not mapped in yet
    /// is dropped, and each first touch was a page fault (16 pages at a
    /// time).
    fn fetch_ahead(&mut self) {
        const AHEAD: usize = 8 << 10;
        if let Bytes::Map(map) = &self.bytes {
            populate_next(map, &self.populated, self.pos + AHEAD + POPULATE_CHUNK);
        }
    }

    /// Asks the cache for the next record's first [`NEXT_RECORD_LINES`]
    /// lines as soon as its place is known, while the analyzer works on
    /// this one: where a record starts is known only once the one before
    /// it is read, so the processor cannot fetch ahead by itself, and
    /// waiting for memory was the reader's largest cost.
    fn fetch_next_record(&self) {
        if let Bytes::Map(map) = &self.bytes {
            if let Some(next) = map.get(self.pos..) {
                prefetch(next, NEXT_RECORD_LINES);
            }
        }
    }

    /// The end of the bytes: a clean end, the stream's error, or a record
    /// cut short (`need` bytes were wanted).
    fn at_end(&mut self, need: usize) -> Result<Status> {
        self.ended = true;
        let left = self.bytes.from(self.pos).len();
        if let Bytes::Stream {
            failed: Some(e),
            kind,
            ..
        } = &self.bytes
        {
            if *kind == Compression::None {
                bail!(
                    "{}: reading failed after packet {}: {e}",
                    self.name,
                    self.packets
                );
            }
            bail!(
                "{}: the {} stream is corrupt after packet {}: {e}",
                self.name,
                kind.name(),
                self.packets
            );
        }
        if left == 0 {
            self.unknown_link_error()?;
            return Ok(Status::Ended);
        }
        let why = match &self.format {
            Format::Pcap(_) if need <= 16 => {
                format!("truncated dump file; tried to read 16 header bytes, only got {left}")
            }
            Format::Pcap(_) => format!(
                "truncated dump file; tried to read {} captured bytes, only got {}",
                need - 16,
                left - 16
            ),
            // libpcap reads a block's 8-byte header, then the rest.
            Format::PcapNg(_) if need <= 8 || left < 8 => {
                format!("truncated pcapng dump file; tried to read 8 bytes, only got {left}")
            }
            Format::PcapNg(_) => format!(
                "truncated pcapng dump file; tried to read {} bytes, only got {}",
                need - 8,
                left - 8
            ),
        };
        self.corrupt(why)
    }

    fn corrupt(&mut self, why: String) -> Result<Status> {
        self.ended = true;
        bail!(
            "{}: capture is truncated or corrupt after packet {}: {why}",
            self.name,
            self.packets
        )
    }

    /// At the end of a file of a link type tlsrum does not read: says so,
    /// once, with the number and what became of its frames.
    fn unknown_link_error(&self) -> Result<()> {
        let LinkType::Unknown(n) = self.link else {
            return Ok(());
        };
        bail!(
            "{}: link type {n} ({}) is not supported: its {} frames were counted as unknown_link_frames and give no records; tlsrum reads {}",
            self.name,
            self.link_name,
            self.packets,
            LinkType::supported()
        )
    }
}

impl Source for PcapFile {
    /// Hands over up to [`BATCH`] packets, borrowed from the file's
    /// bytes; a file never waits.
    fn poll(&mut self, _timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<Status> {
        if self.ended {
            return Ok(Status::Ended);
        }
        loop {
            if self.limit.is_some_and(|n| self.packets >= n) {
                self.ended = true;
                self.unknown_link_error()?;
                return Ok(Status::Ended);
            }
            self.fetch_ahead();
            // Matched where it is returned: moved into a local first, the
            // frame was copied with wide loads over the narrow stores that
            // had just written it (a store-forwarding stall a packet).
            match self.format.next(self.bytes.from(self.pos)) {
                Err(why) => return self.corrupt(why),
                Ok(Step::Need(n)) if self.bytes.done() => return self.at_end(n),
                Ok(Step::Need(n)) => self.bytes.fill(&mut self.pos, n),
                Ok(Step::Skip(n)) => self.pos += n,
                Ok(Step::Frame(n, ref frame)) => {
                    self.pos += n;
                    self.fetch_next_record();
                    let data = if self.format.needs_fixup(frame.dlt) {
                        swap_nflog(frame.data, frame.len, &mut self.scratch);
                        &self.scratch[..]
                    } else {
                        frame.data
                    };
                    if let Some(filter) = self.filter.as_mut() {
                        match filter.accepts(frame, data) {
                            Ok(true) => {}
                            Ok(false) => continue,
                            Err(e) => {
                                self.ended = true;
                                return Err(e.context(format!(
                                    "{}: bad --filter expression {:?} for link type {}",
                                    self.name, filter.expr, frame.dlt
                                )));
                            }
                        }
                    }
                    self.packets += 1;
                    if frame.caplen < frame.len {
                        self.cut += 1;
                        self.cut_at = self.cut_at.max(frame.caplen);
                    }
                    if self.frame_link.0 != frame.dlt {
                        self.frame_link = (frame.dlt, LinkType::from_number(frame.dlt));
                    }
                    f(Captured::Frame {
                        ts: frame.ts,
                        link: &self.frame_link.1,
                        data,
                    });
                    if self.packets.is_multiple_of(BATCH) {
                        self.release();
                        return Ok(Status::Open);
                    }
                }
            }
        }
    }

    fn mapping(&mut self) -> Option<Mapping> {
        let Bytes::Map(map) = &self.bytes else {
            return None;
        };
        let keep = self
            .keep
            .get_or_insert_with(|| Arc::new(AtomicUsize::new(self.pos)))
            .clone();
        Some(Mapping {
            bytes: map.clone(),
            keep,
            populated: self.populated.clone(),
            released: self.released.clone(),
        })
    }

    fn link_types(&self) -> Vec<LinkType> {
        vec![self.link]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_names_with_and_without_compression() {
        for yes in [
            "a.pcap",
            "a.PCAPNG",
            "x/a.cap",
            "a.pcap.gz",
            "a.pcapng.zst",
            "a.cap.zstd",
        ] {
            assert!(is_capture_name(Path::new(yes)), "{yes}");
        }
        for no in ["a.gz", "a.txt.gz", "a.pcap.xz", "pcap", "a.ndjson", "a.zst"] {
            assert!(!is_capture_name(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn compression_by_magic() {
        assert_eq!(
            compression("f", &[0x1f, 0x8b, 8]).unwrap(),
            Compression::Gzip
        );
        assert_eq!(
            compression("f", &[0x28, 0xb5, 0x2f, 0xfd, 0]).unwrap(),
            Compression::Zstd
        );
        assert_eq!(
            compression("f", &[0xd4, 0xc3, 0xb2, 0xa1]).unwrap(),
            Compression::None
        );
        let xz = compression("f.xz", &[0xfd, b'7', b'z', b'X', b'Z', 0]).unwrap_err();
        assert!(xz.to_string().contains("xz"), "{xz}");
    }
}
