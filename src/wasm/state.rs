//! What a filter's store holds, and the host functions the WIT grants it:
//! `host.config`, `host.log` (into the gateway's log, tagged with the
//! filter's name), `cache.limit-ttl` for authenticators and authorizers and,
//! for auditors, `sink.write` and `sink.write-lines`; the same for
//! components built against the earlier contracts (0.3.0 and 0.2.0 have no
//! `write-lines`, 0.1.0 no `cache` either). WASI is linked because
//! guest standard libraries import it, but its context grants only what the
//! manifest's `wasi` table names (environment variables, folders, standard
//! streams); by default nothing, and never the network. A filter not
//! granted the standard streams still has a stderr: its last bytes are kept
//! in memory for the report of a trap (see [`StderrTail`]).

use std::io::{BufWriter, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{cache, host, sink, types, v0_1, v0_2, v0_3};
use crate::config::stages::{Sink, WasiGrants};

/// The most of a filter's own words the gateway keeps, in bytes: its
/// error's message, a decision's reason, a rejection's reason and message,
/// a line it logs.
/// They reach the log, traces, audit events, the decision cache and (a
/// denial's) the client's Status, and a filter's memory, which may be a
/// gigabyte, is no bound for any of them. 4 KiB: kube's bound on the
/// warnings admission webhooks add to a response (`truncateAtTotalRunes`,
/// `staging/src/k8s.io/apiserver/pkg/endpoints/filters/warning.go`), and
/// what a trap's report keeps of the filter's stderr.
pub(super) const MAX_FILTER_MESSAGE: usize = 4096;

/// `message`, cut after [`MAX_FILTER_MESSAGE`] bytes (at a character's
/// start), saying how many more there were.
pub(super) fn bounded(mut message: String) -> String {
    if message.len() <= MAX_FILTER_MESSAGE {
        return message;
    }
    let mut end = MAX_FILTER_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = message.len() - end;
    message.truncate(end);
    message.push_str(&format!("... ({cut} more bytes)"));
    message
}

/// Who a filter is, shared by all its instances.
#[derive(Debug)]
pub struct FilterIdentity {
    /// The filter's name in the manifest.
    pub name: String,
    /// The filter's `config` table, as JSON.
    pub config_json: String,
    /// Where an auditor's `sink` writes, for an audit filter.
    pub sink: Option<SinkWriter>,
    /// The directories and environment the filter is granted.
    pub wasi: WasiGrants,
}

/// An open audit sink. A file sink is buffered: records reach the file when
/// the buffer fills and whenever the audit stage flushes it (after every
/// event in blocking mode, whenever the batch queue runs empty, and when the
/// filter is dropped at a reload or shutdown), so a busy gateway makes one
/// `write(2)` per batch of events rather than one per event.
#[derive(Debug)]
pub enum SinkWriter {
    /// The gateway's standard output.
    Stdout,
    /// A file, buffered.
    File(Mutex<BufWriter<std::fs::File>>),
}

/// A file sink's buffer: room for a few hundred Metadata-level events.
const SINK_BUFFER_BYTES: usize = 64 * 1024;

impl SinkWriter {
    pub(crate) fn open(sink: &Sink) -> std::io::Result<SinkWriter> {
        match sink {
            Sink::Stdout => Ok(SinkWriter::Stdout),
            Sink::File(path) => {
                if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                Ok(SinkWriter::File(Mutex::new(BufWriter::with_capacity(
                    SINK_BUFFER_BYTES,
                    file,
                ))))
            }
        }
    }

    fn write_line(&self, record: &str) -> std::io::Result<()> {
        let mut line = Vec::with_capacity(record.len() + 1);
        line.extend_from_slice(record.as_bytes());
        line.push(b'\n');
        self.append(&line)
    }

    /// Appends `bytes`, whole lines, in one write to the buffer.
    fn append(&self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            SinkWriter::Stdout => std::io::stdout().lock().write_all(bytes),
            SinkWriter::File(file) => match file.lock() {
                Ok(mut file) => file.write_all(bytes),
                Err(_) => Err(poisoned()),
            },
        }
    }

    /// Writes out what the buffer holds.
    pub(crate) fn flush(&self) -> std::io::Result<()> {
        match self {
            SinkWriter::Stdout => std::io::stdout().lock().flush(),
            SinkWriter::File(file) => match file.lock() {
                Ok(mut file) => file.flush(),
                Err(_) => Err(poisoned()),
            },
        }
    }
}

fn poisoned() -> std::io::Error {
    std::io::Error::other("the sink's lock is poisoned")
}

/// The most elements one of a filter's tables may hold, on either engine:
/// the instance pool reserves this many for each table
/// (`PoolingAllocationConfig::table_elements`, wasmtime's default), and a
/// store's limits hold the fallback engine, which allocates on demand, to
/// the same. Each element is a pointer in the host, outside the filter's
/// `memory`: 160 KiB a table.
pub(super) const MAX_TABLE_ELEMENTS: usize = 20_000;

/// The most core instances one filter's component may make, on either
/// engine. A component made by `componentize-py` makes 14 (its interpreter's
/// shared libraries, each a core module), one made by `cargo component`,
/// `jco` or `wasi-sdk` 3 or 4 (the filter, the WASI adapter, their shims).
pub(super) const MAX_CORE_INSTANCES: u32 = 20;
/// The most linear memories one filter's component may hold, on either
/// engine: each toolchain makes one, a component linking two modules with
/// memories of their own (filters/wat/grow-authz) two.
pub(super) const MAX_MEMORIES: u32 = 2;
/// The most tables one filter's component may hold, on either engine: each
/// toolchain makes two (the filter's function table and its shim's).
pub(super) const MAX_TABLES: u32 = 4;

/// A store's memory cap (the manifest's `memory`), and how far its
/// linear memories have grown towards it, together. A component may hold
/// several memories (one for each of its core instances that defines one, as
/// a toolchain that links modules with their own memories makes), while
/// wasmtime asks about each memory alone: the size it is given is that
/// memory's. So the cap is held here, against the sum of every growth
/// granted, each memory's initial size included (wasmtime asks for it as a
/// growth from nothing); held to each memory alone, a filter with two
/// memories had twice its `memory`.
pub(crate) struct MemoryBudget {
    limits: StoreLimits,
    cap: usize,
    /// The size of the store's linear memories, together.
    total: usize,
}

impl MemoryBudget {
    fn new(cap: usize) -> Self {
        MemoryBudget {
            limits: wasmtime::StoreLimitsBuilder::new()
                .table_elements(MAX_TABLE_ELEMENTS)
                .instances(MAX_CORE_INSTANCES as usize)
                .memories(MAX_MEMORIES as usize)
                .tables(MAX_TABLES as usize)
                .build(),
            cap,
            total: 0,
        }
    }

    /// Whether a memory of `current` bytes may grow to `desired` within the
    /// cap, the store's other memories counted.
    pub(crate) fn admits(&self, current: usize, desired: usize) -> bool {
        self.total.saturating_add(desired.saturating_sub(current)) <= self.cap
    }

    /// True once the memories have grown past three quarters of the cap. An
    /// instance that keeps growing (a guest heap that fragments, a leak)
    /// would otherwise reach the cap mid-call and trap; a pooled one this
    /// full is retired instead of reused.
    pub(crate) fn nearly_spent(&self) -> bool {
        self.total > self.cap / 4 * 3
    }

    /// The size of the store's linear memories together, in bytes.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// The cap, in bytes.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }
}

impl wasmtime::ResourceLimiter for MemoryBudget {
    /// A growth that failed after it was granted (wasmtime could not map
    /// the memory) stays counted: the total is never less than the memories
    /// hold, so the cap errs towards refusing.
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.admits(current, desired)
            && self.limits.memory_growing(current, desired, maximum)?;
        if allowed {
            self.total = self.total.saturating_add(desired.saturating_sub(current));
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// How much of a call's stderr a trap's report keeps: its last bytes, where
/// an interpreter prints the exception that killed it.
const STDERR_TAIL_BYTES: usize = 4096;

/// The last [`STDERR_TAIL_BYTES`] a filter wrote to its stderr in the current
/// call, for the report of a trap (`wasmgate try`'s detail, the gateway's
/// trap log line). The guest's writes always succeed (older bytes are
/// dropped), so a chatty filter never fails for it; a call that writes
/// nothing costs one atomic load.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<TailBuffer>);

#[derive(Default)]
struct TailBuffer {
    /// Set by a write, so that forgetting an empty tail takes no lock.
    written: AtomicBool,
    bytes: Mutex<Vec<u8>>,
}

impl StderrTail {
    fn append(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.0.written.store(true, Ordering::Relaxed);
        let Ok(mut tail) = self.0.bytes.lock() else {
            return;
        };
        let bytes = &bytes[bytes.len().saturating_sub(STDERR_TAIL_BYTES)..];
        let excess = (tail.len() + bytes.len()).saturating_sub(STDERR_TAIL_BYTES);
        tail.drain(..excess);
        tail.extend_from_slice(bytes);
    }

    /// Empties the tail: a new call starts.
    fn forget(&self) {
        if self.0.written.swap(false, Ordering::Relaxed)
            && let Ok(mut tail) = self.0.bytes.lock()
        {
            tail.clear();
        }
    }

    /// What the tail holds, as text (lossy), without its trailing blank;
    /// None when the filter wrote nothing.
    fn text(&self) -> Option<String> {
        if !self.0.written.load(Ordering::Relaxed) {
            return None;
        }
        let tail = self.0.bytes.lock().ok()?;
        let text = String::from_utf8_lossy(&tail);
        let text = text.trim_end();
        (!text.is_empty()).then(|| text.to_owned())
    }
}

impl IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrTail {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for StderrTail {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Any amount: what does not fit pushes older bytes out.
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for StderrTail {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for StderrTail {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The data of one filter store.
pub struct FilterState {
    /// Built on the first WASI call: a component that imports no WASI (the
    /// shipped Rust filters) never pays for it. Filters granted folders get
    /// theirs at once, so a folder that cannot be opened fails the
    /// instantiation rather than a call.
    wasi: Option<WasiCtx>,
    /// The stderr of a filter not granted the standard streams, made with
    /// its WASI context.
    stderr: Option<StderrTail>,
    table: ResourceTable,
    pub(crate) memory: MemoryBudget,
    pub(crate) identity: Arc<FilterIdentity>,
    /// When the current call must be finished by; checked at every epoch tick.
    pub deadline: Instant,
    /// The shortest time the current call's answer may be cached, when the
    /// filter said (`cache.limit-ttl`); reset before every call.
    pub ttl_limit: Option<Duration>,
}

impl FilterState {
    /// A store's state; fails only when a granted folder cannot be opened.
    pub fn new(identity: Arc<FilterIdentity>, memory: u64) -> wasmtime::Result<Self> {
        let memory = MemoryBudget::new(usize::try_from(memory).unwrap_or(usize::MAX));
        let mut stderr = None;
        let wasi = if identity.wasi.dirs.is_empty() {
            None
        } else {
            Some(wasi_context(&identity.wasi, &mut stderr)?)
        };
        Ok(FilterState {
            wasi,
            stderr,
            table: ResourceTable::new(),
            memory,
            identity,
            deadline: Instant::now(),
            ttl_limit: None,
        })
    }

    /// Forgets what the previous call wrote to stderr.
    pub(crate) fn forget_stderr(&self) {
        if let Some(stderr) = &self.stderr {
            stderr.forget();
        }
    }

    /// A trap's message with the last bytes the call wrote to stderr (an
    /// interpreter's traceback, the filter's own prints), when it wrote any.
    pub(crate) fn explain_trap(&self, message: String) -> String {
        match self.stderr.as_ref().and_then(StderrTail::text) {
            Some(stderr) => format!("{message}\n\nthe filter's stderr (last bytes):\n{stderr}"),
            None => message,
        }
    }
}

/// The WASI context a filter gets: what the manifest granted, nothing else.
fn wasi_context(grants: &WasiGrants, stderr: &mut Option<StderrTail>) -> wasmtime::Result<WasiCtx> {
    let mut builder = wasi_builder(grants, stderr);
    for dir in &grants.dirs {
        let perms = if dir.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        builder.preopened_dir(&dir.host, &dir.guest, perms)?;
    }
    Ok(builder.build())
}

/// The grants that cannot fail: everything but the folders. Without the
/// standard streams, stderr goes to a new tail, put in `stderr`.
fn wasi_builder(grants: &WasiGrants, stderr: &mut Option<StderrTail>) -> WasiCtxBuilder {
    let mut builder = WasiCtx::builder();
    builder.envs(&grants.env);
    if grants.stdio {
        builder.inherit_stdout().inherit_stderr();
    } else {
        builder.stderr(stderr.get_or_insert_with(StderrTail::default).clone());
    }
    builder
}

impl WasiView for FilterState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        // Only a filter granted no folder gets here without a context.
        let grants = &self.identity.wasi;
        let stderr = &mut self.stderr;
        let ctx = self
            .wasi
            .get_or_insert_with(|| wasi_builder(grants, stderr).build());
        WasiCtxView {
            ctx,
            table: &mut self.table,
        }
    }
}

/// The log target of every filter's lines: `log` writes to it and
/// `log-enabled` asks about it, so `RUST_LOG` decides both alike.
const FILTER_LOG_TARGET: &str = "wasmgate::filter";

impl types::Host for FilterState {}

impl host::Host for FilterState {
    fn config(&mut self) -> String {
        self.identity.config_json.clone()
    }

    fn log_enabled(&mut self, level: types::LogLevel) -> bool {
        match level {
            types::LogLevel::Trace => {
                tracing::enabled!(target: FILTER_LOG_TARGET, tracing::Level::TRACE)
            }
            types::LogLevel::Debug => {
                tracing::enabled!(target: FILTER_LOG_TARGET, tracing::Level::DEBUG)
            }
            types::LogLevel::Info => {
                tracing::enabled!(target: FILTER_LOG_TARGET, tracing::Level::INFO)
            }
            types::LogLevel::Warn => {
                tracing::enabled!(target: FILTER_LOG_TARGET, tracing::Level::WARN)
            }
            types::LogLevel::Error => {
                tracing::enabled!(target: FILTER_LOG_TARGET, tracing::Level::ERROR)
            }
        }
    }

    /// The line is held to the bound of the filter's other words
    /// ([`bounded`]): a filter's memory is no bound for a log line.
    fn log(&mut self, level: types::LogLevel, message: String) {
        let message = bounded(message);
        let filter = self.identity.name.as_str();
        match level {
            types::LogLevel::Trace => {
                tracing::trace!(target: FILTER_LOG_TARGET, filter, "{message}")
            }
            types::LogLevel::Debug => {
                tracing::debug!(target: FILTER_LOG_TARGET, filter, "{message}")
            }
            types::LogLevel::Info => {
                tracing::info!(target: FILTER_LOG_TARGET, filter, "{message}")
            }
            types::LogLevel::Warn => {
                tracing::warn!(target: FILTER_LOG_TARGET, filter, "{message}")
            }
            types::LogLevel::Error => {
                tracing::error!(target: FILTER_LOG_TARGET, filter, "{message}")
            }
        }
    }
}

impl FilterState {
    fn sink(&self) -> Result<&SinkWriter, String> {
        self.identity
            .sink
            .as_ref()
            .ok_or_else(|| "this filter has no sink".to_owned())
    }
}

impl sink::Host for FilterState {
    fn write(&mut self, record: String) -> Result<(), String> {
        self.sink()?
            .write_line(&record)
            .map_err(|error| format!("cannot write the audit record: {error}"))
    }

    /// Refuses a chunk that would leave half a line in the sink.
    fn write_lines(&mut self, lines: Vec<u8>) -> Result<(), String> {
        let sink = self.sink()?;
        match lines.last() {
            None => Ok(()),
            Some(b'\n') => sink
                .append(&lines)
                .map_err(|error| format!("cannot write the audit lines: {error}")),
            Some(_) => Err(
                "write-lines: the chunk does not end in a newline (whole lines only); nothing written"
                    .to_owned(),
            ),
        }
    }
}

impl cache::Host for FilterState {
    fn limit_ttl(&mut self, milliseconds: u64) {
        let limit = Duration::from_millis(milliseconds);
        self.ttl_limit = Some(self.ttl_limit.map_or(limit, |shortest| shortest.min(limit)));
    }
}

/// 0.3.0's host, sink (without `write-lines`) and cache are 0.4.0's,
/// under the older name (its types are 0.4.0's).
impl v0_3::host::Host for FilterState {
    fn config(&mut self) -> String {
        host::Host::config(self)
    }

    fn log_enabled(&mut self, level: types::LogLevel) -> bool {
        host::Host::log_enabled(self, level)
    }

    fn log(&mut self, level: types::LogLevel, message: String) {
        host::Host::log(self, level, message)
    }
}

impl v0_3::sink::Host for FilterState {
    fn write(&mut self, record: String) -> Result<(), String> {
        sink::Host::write(self, record)
    }
}

impl v0_3::cache::Host for FilterState {
    fn limit_ttl(&mut self, milliseconds: u64) {
        cache::Host::limit_ttl(self, milliseconds)
    }
}

/// 0.2.0's host, sink and cache are 0.3.0's, under the older name (with
/// the older name's own `log-level`).
impl v0_2::types::Host for FilterState {}

impl v0_2::host::Host for FilterState {
    fn config(&mut self) -> String {
        host::Host::config(self)
    }

    fn log_enabled(&mut self, level: v0_2::types::LogLevel) -> bool {
        host::Host::log_enabled(self, super::legacy::log_level(level))
    }

    fn log(&mut self, level: v0_2::types::LogLevel, message: String) {
        host::Host::log(self, super::legacy::log_level(level), message)
    }
}

impl v0_2::sink::Host for FilterState {
    fn write(&mut self, record: String) -> Result<(), String> {
        sink::Host::write(self, record)
    }
}

impl v0_2::cache::Host for FilterState {
    fn limit_ttl(&mut self, milliseconds: u64) {
        cache::Host::limit_ttl(self, milliseconds)
    }
}

/// 0.1.0's host and sink are 0.2.0's (its types are 0.2.0's).
impl v0_1::host::Host for FilterState {
    fn config(&mut self) -> String {
        host::Host::config(self)
    }

    fn log_enabled(&mut self, level: v0_2::types::LogLevel) -> bool {
        v0_2::host::Host::log_enabled(self, level)
    }

    fn log(&mut self, level: v0_2::types::LogLevel, message: String) {
        v0_2::host::Host::log(self, level, message)
    }
}

impl v0_1::sink::Host for FilterState {
    fn write(&mut self, record: String) -> Result<(), String> {
        sink::Host::write(self, record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use host::Host as _;
    use types::LogLevel;

    fn state() -> FilterState {
        let identity = Arc::new(FilterIdentity {
            name: "probe".into(),
            config_json: "{}".into(),
            sink: None,
            wasi: WasiGrants::default(),
        });
        FilterState::new(identity, 1 << 20).expect("a state without folders")
    }

    /// Which levels `log-enabled` says are kept under the filter `directives`.
    fn kept(directives: &str) -> Vec<LogLevel> {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(directives))
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let mut state = state();
            [
                LogLevel::Trace,
                LogLevel::Debug,
                LogLevel::Info,
                LogLevel::Warn,
                LogLevel::Error,
            ]
            .into_iter()
            .filter(|level| state.log_enabled(*level))
            .collect()
        })
    }

    #[test]
    fn write_lines_appends_whole_lines_and_refuses_half_a_line() {
        use sink::Host as _;
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("audit.jsonl");
        let identity = Arc::new(FilterIdentity {
            name: "probe".into(),
            config_json: "{}".into(),
            sink: Some(SinkWriter::open(&Sink::File(path.clone())).expect("the sink")),
            wasi: WasiGrants::default(),
        });
        let mut state = FilterState::new(identity, 1 << 20).expect("a state");
        assert_eq!(
            state.write_lines(b"{\"a\":1}\n{\"b\":2}\n".to_vec()),
            Ok(())
        );
        assert_eq!(state.write_lines(Vec::new()), Ok(()));
        let refused = state
            .write_lines(b"{\"c\":3}\n{\"d\"".to_vec())
            .expect_err("half a line");
        assert!(refused.contains("does not end in a newline"), "{refused}");
        assert_eq!(state.write("{\"e\":5}".to_owned()), Ok(()));
        if let Some(sink) = &state.identity.sink {
            sink.flush().expect("flushed");
        }
        assert_eq!(
            std::fs::read_to_string(&path).expect("the file"),
            "{\"a\":1}\n{\"b\":2}\n{\"e\":5}\n"
        );
    }

    #[test]
    fn log_enabled_answers_as_the_gateway_log_filters_filter_lines() {
        use LogLevel::*;
        assert_eq!(kept("info"), [Info, Warn, Error]);
        assert_eq!(kept("wasmgate::filter=debug"), [Debug, Info, Warn, Error]);
        assert_eq!(
            kept("warn,wasmgate::filter=trace"),
            [Trace, Debug, Info, Warn, Error]
        );
        // Another target's level says nothing about filter lines.
        assert_eq!(kept("error,wasmgate::server=trace"), [Error]);
    }
}
