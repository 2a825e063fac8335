//! What both benchmark binaries share: one thread (a tokio current-thread
//! runtime), bind, print `listening on ADDR` once bound, then accept until
//! SIGTERM or SIGINT, each connection served by its own task.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

/// Serves `address` with `connection` for each accepted connection; exits
/// the process (naming `program`) when the address cannot be bound.
pub fn serve<C, F>(program: &str, address: SocketAddr, connection: C)
where
    C: Fn(TcpStream, SocketAddr) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async move {
        let listener = match TcpListener::bind(address).await {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("{program}: cannot listen on {address}: {error}");
                std::process::exit(1);
            }
        };
        println!("listening on {address}");
        let stop = async {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        };
        tokio::pin!(stop);
        loop {
            let (stream, peer) = tokio::select! {
                _ = &mut stop => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        eprintln!("{program}: accept: {error}");
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(connection(stream, peer));
        }
    });
}
