//! What the gateway and a transform worker say to each other over the worker's
//! stdin and stdout: frames of a 4-byte big-endian length and that many bytes; a
//! message is a JSON frame, and a body travels as its own raw frame after the
//! message that announces it.
//!
//! ```text
//! gateway → worker   Init                 (once)
//! worker  → gateway  Ready
//! gateway → worker   Job, $meta frame, body frame   (then per run)
//! worker  → gateway  Reply, body frame when the reply is Sent
//! ```

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The largest frame either side accepts (a body is at most `server.max_body_bytes`,
/// which configuration bounds well below this).
pub const MAX_FRAME: usize = 256 << 20;

/// The programs a worker compiles, in the order jobs name them.
#[derive(Debug, Serialize, Deserialize)]
pub struct Init {
    pub programs: Vec<String>,
    /// The address space the worker may use, in bytes (0: the worker's own bound).
    #[serde(default)]
    pub memory: u64,
}

/// The worker's answer to [`Init`].
#[derive(Debug, Serialize, Deserialize)]
pub enum Ready {
    Ready,
    /// A program did not compile (configuration checked them; another binary's jaq
    /// may disagree).
    Failed(String),
}

/// One run: the program, and how its output is shaped and bounded. `$meta` follows
/// as a frame of JSON (empty: `null`, for a program that does not read it), then
/// the input body as a raw frame.
#[derive(Debug, Serialize, Deserialize)]
pub struct Job {
    pub program: usize,
    pub envelope: bool,
    pub cap: usize,
}

/// How a run failed, as the worker saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// The program raised an error, or gave more than one output.
    Runtime,
    /// The stored body is not JSON.
    NotJson,
    /// The output is larger than the route may send.
    TooLarge,
    /// The output is not what `transform_output` asks for.
    BadOutput,
}

/// The outcome of one run. `Sent` is followed by the body as a raw frame.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Sent {
        content_type: String,
        headers: Vec<(String, String)>,
    },
    /// No output: the delivery is skipped.
    Empty,
    Failed {
        failure: Failure,
        message: String,
    },
}

/// Write one frame.
pub fn write_frame(w: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(bytes)
}

/// Read one frame; `None` at a clean end of input.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = frame_len(len)?;
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(Some(buf))
}

/// Write a message as a JSON frame.
pub fn write_message(w: &mut impl Write, m: &impl Serialize) -> io::Result<()> {
    write_frame(w, &serde_json::to_vec(m).map_err(io::Error::other)?)
}

/// Read a JSON frame as a message; `None` at a clean end of input.
pub fn read_message<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<Option<T>> {
    match read_frame(r)? {
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        None => Ok(None),
    }
}

fn frame_len(len: [u8; 4]) -> io::Result<usize> {
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame larger than the protocol allows",
        ));
    }
    Ok(len)
}

/// [`write_frame`] on an async writer.
pub async fn write_frame_async(
    w: &mut (impl tokio::io::AsyncWrite + Unpin),
    bytes: &[u8],
) -> io::Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(bytes).await
}

/// [`read_frame`] on an async reader; the end of input is an error here (the
/// gateway always waits for an answer).
pub async fn read_frame_async(r: &mut (impl tokio::io::AsyncRead + Unpin)) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = frame_len(len)?;
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    Ok(buf)
}

/// [`read_message`] on an async reader.
pub async fn read_message_async<T: for<'de> Deserialize<'de>>(
    r: &mut (impl tokio::io::AsyncRead + Unpin),
) -> io::Result<T> {
    let b = read_frame_async(r).await?;
    serde_json::from_slice(&b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}
