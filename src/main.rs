//! The `wasmgate` command: parse the CLI, set up logging, load and complete
//! the manifest, build the gateway, run it until a signal asks it to stop.
//! What the commands print and read beyond their flags is `wasmgate::cli`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use wasmgate::config::{self, Config};
use wasmgate::server::{Drained, Gateway};

// mimalloc: the request path makes many small, short-lived allocations
// (headers, boxed futures, bodies, filter inputs), which glibc's malloc
// served at 18% of a proxied request's instructions (bench/README.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gateway described by a manifest.
    Run {
        /// The TOML manifest.
        #[arg(long, short)]
        config: PathBuf,
        /// Threads serving requests (default: one per core). With 1, a
        /// single-threaded runtime serves everything: no work stealing, no
        /// cross-thread wake-ups.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        workers: Option<u16>,
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
        Command::Run { config, workers } => run(&config, workers),
        Command::Try {
            config,
            method,
            path,
            headers,
            body,
        } => try_request(&config, &method, path, &headers, body.as_deref()),
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
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
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
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
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
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let gateway = match Gateway::reporting(config) {
            Ok(gateway) => gateway,
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        };
        let report = wasmgate::try_request::run(&gateway, trial).await;
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

fn run(path: &std::path::Path, workers: Option<u16>) -> ExitCode {
    let config = match config::load(path) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
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
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> ExitCode {
    // Installed before anything listens: a signal that arrives once the
    // gateway serves must start a graceful shutdown, never kill the process.
    let signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            tracing::error!(%error, "cannot install signal handlers");
            return ExitCode::FAILURE;
        }
    };
    let gateway = match Gateway::new(config) {
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
    let signal = signals.wait_for_stop(&running).await;
    tracing::info!(signal, "stop requested");
    match running.shutdown().await {
        Drained::Complete => ExitCode::SUCCESS,
        Drained::TimedOut { .. } => ExitCode::SUCCESS,
    }
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
