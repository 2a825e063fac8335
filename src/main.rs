//! The `wasmgate` command: parse the CLI, set up logging, load and complete
//! the manifest, build the gateway, run it until a signal asks it to stop.
//! What the commands print and read beyond their flags is `wasmgate::cli`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use wasmgate::config::source::{FileSource, ManifestSource};
use wasmgate::config::{self, Config};
use wasmgate::server::{Drained, Gateway};

// mimalloc: the request path makes many small, short-lived allocations
// (headers, boxed futures, bodies, filter inputs), which glibc's malloc
// served at 18% of a proxied request's instructions (bench/README.md).
// glibc's misses a core's L2 less in callgrind's simulation of the
// pass-through, yet took more CPU than mimalloc in an A/B (bench/README.md
// § "a core's L2 is the cliff"), and 2.3-4.6 µs more a request on the
// Intel machine, where jemalloc took 0.3-0.7 more (§ "The layers and the
// allocator timed") and gperftools' tcmalloc the same (§ "The L2 misses
// taken away by another allocator").
#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;

mod allocator {
    //! mimalloc as the global allocator, asked for a plain block whenever
    //! the alignment every one of its blocks has is enough.
    //!
    //! The `mimalloc` crate asks for every block with `mi_malloc_aligned`.
    //! In mimalloc 3 that call's fast path takes the size's page only when
    //! a free block is at hand; when the page's list has run dry it falls
    //! back to over-allocating (the size plus the alignment, from a larger
    //! size class) unless the size's block is a power of two, and leaves
    //! the size's page as it is. The pooled chain took that way for 9.4 of
    //! its 88 allocations a request (callgrind, bench/README.md § "The
    //! allocator's aligned path"). `mi_malloc` refills the page instead.
    //! mimalloc's blocks are all whole words at word-aligned addresses, so
    //! a layout aligned to a word or less is served by the plain calls.

    use std::alloc::{GlobalAlloc, Layout};
    use std::ffi::c_void;

    use libmimalloc_sys as mi;

    /// The alignment every mimalloc block has: its blocks are whole words,
    /// each page's first block aligned to 16 bytes.
    const BLOCK_ALIGN: usize = size_of::<usize>();

    pub(crate) struct Mimalloc;

    // SAFETY: every call is mimalloc's own, with the layout's size; a
    // layout aligned above a word goes to the aligned calls, and a word or
    // less is what every block has (see `BLOCK_ALIGN`). `dealloc` and
    // `realloc` get pointers these returned, as `GlobalAlloc` promises.
    unsafe impl GlobalAlloc for Mimalloc {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: see the impl.
            unsafe {
                if layout.align() <= BLOCK_ALIGN {
                    mi::mi_malloc(layout.size()).cast()
                } else {
                    mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
                }
            }
        }

        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: see the impl.
            unsafe {
                if layout.align() <= BLOCK_ALIGN {
                    mi::mi_zalloc(layout.size()).cast()
                } else {
                    mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
                }
            }
        }

        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
            // SAFETY: see the impl.
            unsafe { mi::mi_free(ptr.cast::<c_void>()) }
        }

        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: see the impl.
            unsafe {
                if layout.align() <= BLOCK_ALIGN {
                    mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
                } else {
                    mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Sizes from 1 byte to 8 KiB, at every alignment from 1 byte to
        /// 4 KiB, allocated, written whole, grown, shrunk and zeroed: each
        /// block there, aligned as asked, its bytes kept across a move, and
        /// a zeroed one zero though the block freed just before it (the
        /// same size, so likely the same block) was not.
        #[test]
        fn every_block_is_aligned_and_keeps_its_bytes() {
            let sizes = (1..=256).chain((264..=8192).step_by(40));
            for size in sizes {
                for align in (0..=12).map(|shift| 1usize << shift) {
                    let layout = Layout::from_size_align(size, align).unwrap();
                    // SAFETY: non-zero sizes; each block freed once, by the
                    // allocator that made it, with the layout it has.
                    unsafe {
                        let block = Mimalloc.alloc(layout);
                        assert!(!block.is_null(), "{layout:?}");
                        assert_eq!(block as usize % align, 0, "{layout:?}");
                        block.write_bytes(0xa5, size);
                        let grown = Mimalloc.realloc(block, layout, size * 3);
                        assert!(!grown.is_null(), "{layout:?} grown");
                        assert_eq!(grown as usize % align, 0, "{layout:?} grown");
                        assert!(
                            std::slice::from_raw_parts(grown, size)
                                .iter()
                                .all(|&b| b == 0xa5)
                        );
                        let shrunk = Mimalloc.realloc(
                            grown,
                            Layout::from_size_align(size * 3, align).unwrap(),
                            size.div_ceil(2),
                        );
                        assert!(!shrunk.is_null(), "{layout:?} shrunk");
                        assert_eq!(shrunk as usize % align, 0, "{layout:?} shrunk");
                        Mimalloc.dealloc(
                            shrunk,
                            Layout::from_size_align(size.div_ceil(2), align).unwrap(),
                        );
                        let zeroed = Mimalloc.alloc_zeroed(layout);
                        assert!(!zeroed.is_null(), "{layout:?} zeroed");
                        assert_eq!(zeroed as usize % align, 0, "{layout:?} zeroed");
                        assert!(
                            std::slice::from_raw_parts(zeroed, size)
                                .iter()
                                .all(|&b| b == 0)
                        );
                        Mimalloc.dealloc(zeroed, layout);
                    }
                }
            }
        }
    }
}

#[derive(Parser)]
#[command(
    name = "wasmgate",
    version,
    about = "A WebAssembly-pluggable API gateway in the shape of the Kubernetes API server"
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// TLS to the fleet's etcd, as etcd's own clients take it.
#[derive(clap::Args, Clone, Default)]
struct EtcdArgs {
    /// The CA that signed etcd's certificate (makes the connection TLS).
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// A client certificate for etcd, with --etcd-keyfile.
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
}

impl EtcdArgs {
    fn target(self, url: &str) -> Result<wasmgate::fleet::Target, wasmgate::fleet::FleetError> {
        let tls = wasmgate::fleet::EtcdTls {
            ca_file: self.etcd_cafile,
            cert_file: self.etcd_certfile,
            key_file: self.etcd_keyfile,
        };
        wasmgate::fleet::Target::parse(url, tls)
    }
}

/// A gateway of a fleet (`run --config etcd://...`).
#[derive(clap::Args, Clone)]
struct MemberArgs {
    /// Where the last good manifest and its components are kept, to start
    /// from while etcd is away (default: ./wasmgate-state).
    #[arg(long, default_value = "wasmgate-state")]
    state_dir: PathBuf,
    /// This gateway's name in the fleet status (default: HOSTNAME-PORT).
    #[arg(long)]
    gateway_id: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gateway described by a manifest.
    Run {
        /// The TOML manifest, or the fleet's etcd: etcd://HOST:PORT[,HOST:PORT...]/PREFIX.
        #[arg(long, short)]
        config: String,
        /// Threads serving requests (default: one per core). With 1, a
        /// single-threaded runtime serves everything: no work stealing, no
        /// cross-thread wake-ups.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        workers: Option<u16>,
        /// Listen here instead of the manifest's `[listen] address`.
        #[arg(long)]
        listen: Option<SocketAddr>,
        #[command(flatten)]
        member: MemberArgs,
        #[command(flatten)]
        etcd: EtcdArgs,
    },
    /// Validate a manifest as `check` does, upload its components to the
    /// fleet's etcd by digest and make it the fleet's manifest.
    Push {
        #[arg(long, short)]
        config: PathBuf,
        /// The fleet: etcd://HOST:PORT[,HOST:PORT...]/PREFIX.
        #[arg(long)]
        to: String,
        #[command(flatten)]
        etcd: EtcdArgs,
    },
    /// Push an earlier revision of the fleet's manifest again.
    Rollback {
        /// The revision to go back to (`wasmgate status` and the gateways name them).
        #[arg(long = "to")]
        revision: i64,
        /// The fleet: etcd://HOST:PORT[,HOST:PORT...]/PREFIX.
        #[arg(long)]
        etcd: String,
        #[command(flatten)]
        tls: EtcdArgs,
    },
    /// Print the fleet: which gateway runs which revision, who refused
    /// what, who is gone.
    Status {
        /// The fleet: etcd://HOST:PORT[,HOST:PORT...]/PREFIX.
        #[arg(long)]
        to: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        etcd: EtcdArgs,
    },
    /// Load, complete and validate a manifest without serving: every problem
    /// with its file:line:column, or a summary of the chain.
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run one request through the manifest's chain, in process, with no
    /// network (routes report the director's choice), and print what every
    /// filter did, as JSON.
    Try {
        #[arg(long, short)]
        config: PathBuf,
        #[arg(long, default_value = "GET")]
        method: String,
        /// Path and query, e.g. /apis/demo.example.io/v1/namespaces/default/widgets
        #[arg(long)]
        path: String,
        /// A request header, `Name: value`; repeatable.
        #[arg(long = "header", short = 'H')]
        headers: Vec<String>,
        /// A file whose contents are the request body.
        #[arg(long)]
        body: Option<PathBuf>,
        /// Run the request this many times and report the last: a filter
        /// with a decision cache then shows `"cache": "hit"`.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=100))]
        repeat: u8,
    },
    /// Write a new filter's folder (sources, README, a try.toml) that builds
    /// with filters/build.sh and passes `wasmgate try` unchanged.
    NewFilter {
        /// The language the filter is written in.
        #[arg(long, value_enum)]
        lang: wasmgate::scaffold::Lang,
        /// The filter world it implements.
        #[arg(long, value_enum)]
        kind: wasmgate::scaffold::FilterKind,
        /// The filter's name: lower-case letters, digits and '-'.
        name: String,
        /// Create the filter's folder in DIR instead of filters/<lang>/ of the checkout.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Run {
            config,
            workers,
            listen,
            member,
            etcd,
        } => run(&config, workers, listen, member, etcd),
        Command::Push { config, to, etcd } => fleet_command(etcd.target(&to), |store| async move {
            let pushed = wasmgate::fleet::push::push(&config, &store).await?;
            Ok(format!(
                "pushed revision {} to {to} ({} components uploaded, {} already stored)",
                pushed.revision, pushed.uploaded, pushed.reused
            ))
        }),
        Command::Rollback {
            revision,
            etcd,
            tls,
        } => fleet_command(tls.target(&etcd), |store| async move {
            let pushed = wasmgate::fleet::push::rollback(revision, &store).await?;
            Ok(format!(
                "rolled back to revision {revision}: pushed as revision {}",
                pushed.revision
            ))
        }),
        Command::Status { to, json, etcd } => fleet_command(etcd.target(&to), |store| async move {
            let fleet = wasmgate::fleet::status::fleet(&store, to).await?;
            Ok(if json {
                serde_json::to_string_pretty(&fleet).unwrap_or_default()
            } else {
                fleet.to_string().trim_end().to_owned()
            })
        }),
        Command::Try {
            config,
            method,
            path,
            headers,
            body,
            repeat,
        } => try_request(&config, &method, path, &headers, body.as_deref(), repeat),
        Command::NewFilter {
            lang,
            kind,
            name,
            dir,
        } => new_filter(lang, kind, name, dir),
    }
}

fn new_filter(
    lang: wasmgate::scaffold::Lang,
    kind: wasmgate::scaffold::FilterKind,
    name: String,
    parent: Option<PathBuf>,
) -> ExitCode {
    let request = wasmgate::scaffold::NewFilter {
        lang,
        kind,
        name,
        parent,
        checkout: None,
    };
    match wasmgate::scaffold::scaffold(&request) {
        Ok(made) => {
            println!("created {}:", made.dir.display());
            for file in &made.files {
                println!(
                    "  {}",
                    file.strip_prefix(&made.dir).unwrap_or(file).display()
                );
            }
            let from = made
                .checkout
                .as_ref()
                .map(|dir| format!(" (from {})", dir.display()))
                .unwrap_or_default();
            println!(
                "\nbuild it{from}:\n  {}\n\ntry it{from}:\n  {}",
                made.build, made.try_command
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.fmt_fields(text_log::EscapedFields).init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The text log's fields, one line an event.
mod text_log {
    use tracing_subscriber::field::RecordFields;
    use tracing_subscriber::fmt::FormatFields;
    use tracing_subscriber::fmt::format::{DefaultFields, Writer};

    /// The fields (the message among them) as tracing's default text
    /// format writes them, with every control character it leaves escaped as
    /// Rust escapes it (`\n`, `\r`, `\t`; tracing writes the ones a
    /// terminal acts on, ESC and BEL, as `\x1b` and `\x07` already): words
    /// the gateway does not choose,
    /// a filter's `host.log` line above all, stay on their event's line, so
    /// they cannot forge another event or drive a terminal. klog quotes a
    /// value's non-printable characters so
    /// (`vendor/k8s.io/klog/v2/internal/serialize/keyvalues.go`,
    /// `writeStringValue`). The JSON log escapes them already.
    pub(super) struct EscapedFields;

    impl<'writer> FormatFields<'writer> for EscapedFields {
        fn format_fields<R: RecordFields>(
            &self,
            mut writer: Writer<'writer>,
            fields: R,
        ) -> std::fmt::Result {
            let mut plain = String::new();
            DefaultFields::new().format_fields(Writer::new(&mut plain), fields)?;
            escape_controls(&plain, &mut writer)
        }
    }

    fn escape_controls(text: &str, out: &mut impl std::fmt::Write) -> std::fmt::Result {
        for c in text.chars() {
            if c.is_control() {
                write!(out, "{}", c.escape_default())?;
            } else {
                out.write_char(c)?;
            }
        }
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn control_characters_are_escaped_and_the_rest_kept() {
            let mut out = String::new();
            escape_controls("one\nforged: two\r\u{1b}[2K\tü \\n \"q\"", &mut out).unwrap();
            assert_eq!(out, r#"one\nforged: two\r\u{1b}[2K\tü \n "q""#);
        }
    }
}

/// The runtime of a command that is not the server (`check`, `try`, the
/// fleet's): one thread is all they need.
fn one_thread_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| {
            eprintln!("cannot start the runtime: {error}");
            ExitCode::FAILURE
        })
}

fn check(path: &std::path::Path) -> ExitCode {
    // The steps a start (and a reload) takes: parse, complete, validate,
    // load and compile every component, build the chain; nothing is written.
    let config = match config::load(path) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match one_thread_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(async { Gateway::check(config) }) {
        Ok(checked) => {
            print!(
                "{}",
                wasmgate::cli::summary(&checked.config, &checked.steps)
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

fn try_request(
    config: &std::path::Path,
    method: &str,
    path: String,
    headers: &[String],
    body: Option<&std::path::Path>,
    repeat: u8,
) -> ExitCode {
    let trial = match wasmgate::cli::trial(method, path, headers, body) {
        Ok(trial) => trial,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    let config = match config::load(config) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match one_thread_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let gateway = match Gateway::reporting(config) {
            Ok(gateway) => gateway,
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        };
        let report = wasmgate::try_request::run_repeated(&gateway, trial, repeat).await;
        gateway.flush_audit().await;
        match report {
            Ok(report) => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{error}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Runs one fleet command (push, rollback, status) against its etcd and
/// prints what it says.
fn fleet_command<F, Fut>(
    target: Result<wasmgate::fleet::Target, wasmgate::fleet::FleetError>,
    command: F,
) -> ExitCode
where
    F: FnOnce(wasmgate::fleet::store::Store) -> Fut,
    Fut: std::future::Future<Output = Result<String, wasmgate::fleet::push::PushError>>,
{
    let target = match target {
        Ok(target) => target,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match one_thread_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let store = match wasmgate::fleet::store::Store::open(&target).await {
            Ok(store) => store,
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        };
        match command(store).await {
            Ok(said) => {
                println!("{said}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{error}");
                ExitCode::FAILURE
            }
        }
    })
}

fn run(
    config: &str,
    workers: Option<u16>,
    listen: Option<SocketAddr>,
    member: MemberArgs,
    etcd: EtcdArgs,
) -> ExitCode {
    let manifest = if wasmgate::fleet::Target::is_etcd_url(config) {
        match etcd.target(config) {
            Ok(target) => Manifest::Fleet(wasmgate::fleet::watch::Options {
                target,
                state_dir: member.state_dir,
                listen,
            }),
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::from(2);
            }
        }
    } else {
        let source = FileSource {
            path: PathBuf::from(config),
            listen,
        };
        match source.load() {
            Ok(loaded) => Manifest::File(Box::new(loaded), source),
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        }
    };
    let mut runtime = match workers {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(workers) => {
            let mut runtime = tokio::runtime::Builder::new_multi_thread();
            runtime.worker_threads(usize::from(workers));
            runtime
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(manifest, member.gateway_id))
}

/// Where `run` takes its manifest from.
enum Manifest {
    File(Box<Config>, FileSource),
    Fleet(wasmgate::fleet::watch::Options),
}

/// How long a stopping gateway waits for its fleet status to be taken out.
const FLEET_LEAVE_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

async fn serve(manifest: Manifest, gateway_id: Option<String>) -> ExitCode {
    // Installed before anything listens: a signal that arrives once the
    // gateway serves must start a graceful shutdown, never kill the process.
    let signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            tracing::error!(%error, "cannot install signal handlers");
            return ExitCode::FAILURE;
        }
    };
    let (built, member) = match manifest {
        Manifest::File(config, source) => (
            Gateway::with_source(*config, std::sync::Arc::new(source), Vec::new()),
            None,
        ),
        Manifest::Fleet(options) => match wasmgate::fleet::watch::Member::join(&options).await {
            Ok((member, config)) => (
                Gateway::with_source(config, member.source(), vec![member.readyz_check()]),
                Some(member),
            ),
            Err(error) => {
                tracing::error!(%error, "cannot join the fleet");
                return ExitCode::FAILURE;
            }
        },
    };
    let gateway = match built {
        Ok(gateway) => gateway,
        Err(error) => {
            tracing::error!(%error, "cannot build the gateway");
            return ExitCode::FAILURE;
        }
    };
    let running = match gateway.start().await {
        Ok(running) => running,
        Err(error) => {
            tracing::error!(%error, "cannot start the gateway");
            return ExitCode::FAILURE;
        }
    };
    let following = match (member, running.reload_trigger()) {
        (Some(member), Some(trigger)) => {
            let id = gateway_id.unwrap_or_else(|| default_gateway_id(running.local_addr));
            Some(member.follow(id, running.local_addr, trigger))
        }
        _ => None,
    };
    let signal = signals.wait_for_stop(&running).await;
    tracing::info!(signal, "stop requested");
    if let Some(following) = following {
        following.stop(FLEET_LEAVE_LIMIT).await;
    }
    match running.shutdown().await {
        Drained::Complete => ExitCode::SUCCESS,
        Drained::TimedOut { .. } => ExitCode::SUCCESS,
    }
}

/// `HOSTNAME-PORT`: stable across restarts, distinct for gateways of one host.
fn default_gateway_id(listening: SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "gateway".to_owned());
    format!("{host}-{}", listening.port())
}

/// The signals the gateway answers: SIGTERM and SIGINT stop it, SIGHUP reloads.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for SIGTERM or SIGINT; every SIGHUP meanwhile asks for a reload.
    async fn wait_for_stop(mut self, running: &wasmgate::server::RunningGateway) -> &'static str {
        loop {
            tokio::select! {
                _ = self.term.recv() => return "SIGTERM",
                _ = self.int.recv() => return "SIGINT",
                _ = self.hup.recv() => {
                    tracing::info!("SIGHUP: reloading the configuration");
                    running.request_reload();
                }
            }
        }
    }
}
