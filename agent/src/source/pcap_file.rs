//! A capture file (pcap or pcapng, plain or compressed with gzip or zstd,
//! as Wireshark reads them) read through libpcap, as `replay` reads it:
//! optionally filtered, handed over in batches.
//!
//! A compressed file is decompressed streaming by a thread into a pipe
//! whose other end libpcap reads (libpcap reads only plain files), so
//! `--filter` (BPF, compiled by libpcap) and every link type work on it as
//! on a plain file, and nothing is held in memory or written to disk.

use std::fs::File;
use std::io::{self, BufReader, IsTerminal, Read, Seek, Write};
use std::os::fd::{AsFd, IntoRawFd, OwnedFd};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use analyzer::wire::LinkType;
use anyhow::{anyhow, bail, Context, Result};

use super::{Captured, Source, Status};

/// Packets handed over per poll: the caller writes the records out after
/// each batch, which bounds how many wait in memory.
pub const BATCH: u64 = 4096;

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

/// The thread feeding libpcap's pipe: its result is the bytes written, or
/// why the stream could not be read to its end.
type Feeder = JoinHandle<io::Result<u64>>;

/// Opens libpcap on the read end of a pipe that a thread fills from
/// `stream` (a decompressor, or a file that cannot seek back over the
/// bytes read to recognise it). The stream's first bytes are checked to be
/// a capture's first, so that libpcap, which keeps the pipe when it fails
/// to open, only ever gets a stream it can read.
fn open_stream(
    name: &str,
    head: [u8; 4],
    n: usize,
    mut stream: Box<dyn Read + Send>,
    kind: Compression,
) -> Result<(pcap::Capture<pcap::Offline>, Feeder)> {
    let what = kind.name();
    if !is_capture_magic(&head[..n]) {
        if kind == Compression::None {
            bail!("{name}: cannot open as pcap or pcapng: not a capture file");
        }
        bail!("{name}: {what}-compressed, but what it holds is not pcap or pcapng");
    }
    let (reader, mut writer) = io::pipe().context("creating a pipe")?;
    let feeder = std::thread::Builder::new()
        .name("tlsrum-feed".into())
        .spawn(move || -> io::Result<u64> {
            writer.write_all(&head[..n])?;
            // Ends with EPIPE when libpcap stops reading (the capture dropped).
            Ok(io::copy(&mut stream, &mut writer)? + n as u64)
        })
        .context("starting the thread that feeds libpcap")?;
    let fd = OwnedFd::from(reader).into_raw_fd();
    // SAFETY: `fd` is a pipe's read end that nothing else owns; the capture
    // becomes its sole owner (and closes it when dropped).
    let cap = unsafe { pcap::Capture::from_raw_fd(fd) }
        .with_context(|| format!("{name}: cannot open the {what} stream as pcap or pcapng"))?;
    Ok((cap, feeder))
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
    Capture(PcapFile),
    Text(Box<dyn Read + Send>),
}

/// Undoes `kind`'s compression of `stream` (whose first bytes were read
/// into `head`): the whole decompressed stream.
fn decompress(
    name: &str,
    head: [u8; 6],
    n: usize,
    file: File,
    kind: Compression,
) -> Result<Box<dyn Read + Send>> {
    let stream = io::Cursor::new(head).take(n as u64).chain(file);
    Ok(match kind {
        Compression::None => Box::new(stream),
        // Multi-member: `cat a.gz b.gz` is one gzip file.
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(stream))),
        Compression::Zstd => Box::new(
            zstd::stream::read::Decoder::new(stream)
                .with_context(|| format!("{name}: cannot start reading it as zstd"))?,
        ),
    })
}

pub struct PcapFile {
    /// The path as the user gave it, for messages.
    name: String,
    /// None once the file was read to its end (or failed).
    cap: Option<pcap::Capture<pcap::Offline>>,
    link: LinkType,
    /// libpcap's name of the link type, for the message about an unknown one.
    link_name: String,
    packets: u64,
    /// Packets the capture cut short (caplen < len), and the longest such
    /// cut (the snap length, as the file shows it).
    cut: u64,
    cut_at: u32,
    /// The thread feeding libpcap a decompressed (or unseekable) file,
    /// and what the file is.
    feeder: Option<(Feeder, Compression)>,
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
            Opened::Capture(c) => Ok(c),
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
            return Ok(Opened::Text(decompress(&name, head, n, file, kind)?));
        }
        // A plain file libpcap reads itself, from the start again; other
        // streams get back the bytes read to recognise them.
        // libpcap keeps a file it fails to open: what is no capture at all
        // is turned away here.
        if kind == Compression::None && !is_capture_magic(&head[..n]) {
            bail!(
                "{name}: cannot open as pcap or pcapng (nor as a Zeek ssl.log): not a capture file"
            );
        }
        let (mut cap, feeder) = if kind == Compression::None && file.rewind().is_ok() {
            let fd = OwnedFd::from(file).into_raw_fd();
            // SAFETY: `fd` is the file just opened, owned by nothing else;
            // the capture becomes its sole owner.
            let cap = unsafe { pcap::Capture::from_raw_fd(fd) }
                .with_context(|| format!("{name}: cannot open as pcap or pcapng"))?;
            (cap, None)
        } else {
            let mut stream = decompress(&name, head, n, file, kind)?;
            let mut inner = [0u8; 4];
            let m = read_head(&mut stream, &mut inner)
                .with_context(|| format!("{name}: cannot read the {} stream", kind.name()))?;
            if kind != Compression::None && is_text_log(&inner[..m]) {
                let text = io::Cursor::new(inner).take(m as u64).chain(stream);
                return Ok(Opened::Text(Box::new(text)));
            }
            let (cap, t) = open_stream(&name, inner, m, stream, kind)?;
            (cap, Some((t, kind)))
        };
        let dlt = cap.get_datalink();
        let link = LinkType::from_number(dlt.0);
        if let Some(f) = filter {
            cap.filter(f, true)
                .with_context(|| format!("{name}: bad --filter expression {f:?}"))?;
        }
        Ok(Opened::Capture(PcapFile {
            name,
            cap: Some(cap),
            link,
            link_name: dlt.get_name().unwrap_or_else(|_| "unknown".into()),
            packets: 0,
            cut: 0,
            cut_at: 0,
            feeder,
            limit: None,
        }))
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

    /// The file is read to its end (or failed there): closes libpcap's end
    /// of the pipe, then takes the feeding thread's word on the stream,
    /// which names the real cause when libpcap saw a stream cut short.
    fn close(&mut self) -> Result<()> {
        self.cap = None;
        let Some((thread, kind)) = self.feeder.take() else {
            return Ok(());
        };
        let what = kind.name();
        match thread.join() {
            Ok(Ok(_)) => Ok(()),
            // libpcap stopped reading first: its own error says why.
            Ok(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            Ok(Err(e)) if kind == Compression::None => Err(anyhow!(
                "{}: reading failed after packet {}: {e}",
                self.name,
                self.packets
            )),
            Ok(Err(e)) => Err(anyhow!(
                "{}: the {what} stream is corrupt after packet {}: {e}",
                self.name,
                self.packets
            )),
            Err(_) => Err(anyhow!("{}: the {what} stream's reader failed", self.name)),
        }
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
    /// Hands over up to [`BATCH`] packets; a file never waits.
    fn poll(&mut self, _timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<Status> {
        let Some(cap) = self.cap.as_mut() else {
            return Ok(Status::Ended);
        };
        loop {
            if self.limit.is_some_and(|n| self.packets >= n) {
                self.close()?;
                self.unknown_link_error()?;
                return Ok(Status::Ended);
            }
            match cap.next_packet() {
                Ok(pkt) => {
                    self.packets += 1;
                    if pkt.header.caplen < pkt.header.len {
                        self.cut += 1;
                        self.cut_at = self.cut_at.max(pkt.header.caplen);
                    }
                    let ts = pkt.header.ts.tv_sec as f64 + pkt.header.ts.tv_usec as f64 * 1e-6;
                    f(Captured::Frame {
                        ts,
                        link: self.link,
                        data: pkt.data,
                    });
                    if self.packets.is_multiple_of(BATCH) {
                        return Ok(Status::Open);
                    }
                }
                Err(pcap::Error::NoMorePackets) => {
                    self.close()?;
                    self.unknown_link_error()?;
                    return Ok(Status::Ended);
                }
                Err(e) => {
                    self.close()?;
                    bail!(
                        "{}: capture is truncated or corrupt after packet {}: {e}",
                        self.name,
                        self.packets
                    )
                }
            }
        }
    }

    fn link_types(&self) -> Vec<LinkType> {
        vec![self.link]
    }
}

impl Drop for PcapFile {
    /// Closes the pipe before the thread is left to end on its own.
    fn drop(&mut self) {
        self.cap = None;
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
