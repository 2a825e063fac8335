//! systemd's notification protocol on the real binary: a Unix datagram
//! socket bound by the test is its `$NOTIFY_SOCKET`, and the messages come
//! in order: `READY=1` once serving (kube's `systemd.SdNotify(true,
//! "READY=1\n")` in `staging/src/k8s.io/apiserver/pkg/server/genericapiserver.go`),
//! `RELOADING=1` with `MONOTONIC_USEC=` then `READY=1` around a SIGHUP
//! reload, `STOPPING=1` at SIGTERM; `WATCHDOG=1` every half
//! `WATCHDOG_USEC` meanwhile.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::support::*;

/// Receives datagrams into `messages` until `done(messages)` holds;
/// fails the test after [`BOUND`].
fn receive_until(
    socket: &UnixDatagram,
    messages: &mut Vec<String>,
    done: impl Fn(&[String]) -> bool,
) {
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    while !done(messages) {
        assert!(started.elapsed() < BOUND, "timed out; got {messages:?}");
        if let Ok(read) = socket.recv(&mut buffer) {
            messages.push(String::from_utf8_lossy(&buffer[..read]).into_owned());
        }
    }
}

/// How many of `messages` are `message`.
fn count(messages: &[String], message: &str) -> usize {
    messages.iter().filter(|m| m.as_str() == message).count()
}

#[test]
fn ready_reloading_stopping_and_the_watchdog_reach_notify_socket() {
    let dir = new_dir();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("a read timeout");
    let manifest = dir.path().join("gateway.toml");
    std::fs::write(
        &manifest,
        plaintext("[[servers]]\nname = \"s\"\n\n[[servers.routes]]\npath = \"/hello\"\nstatic = { body = \"hello\" }\n"),
    )
    .expect("write the manifest");
    let socket_env = socket_path.to_str().expect("a UTF-8 path");
    let mut gateway = GatewayProcess::spawn_with_env(
        &manifest,
        &[("NOTIFY_SOCKET", socket_env), ("WATCHDOG_USEC", "200000")],
    );
    let mut messages = Vec::new();
    receive_until(&socket, &mut messages, |m| count(m, "READY=1\n") == 1);
    gateway.wait_for_signal_handlers(&[libc::SIGHUP, libc::SIGTERM]);
    // Two watchdog periods (100 ms each) at least.
    receive_until(&socket, &mut messages, |m| count(m, "WATCHDOG=1\n") >= 2);
    gateway.child.signal(libc::SIGHUP);
    receive_until(&socket, &mut messages, |m| count(m, "READY=1\n") == 2);
    gateway.child.signal(libc::SIGTERM);
    receive_until(&socket, &mut messages, |m| count(m, "STOPPING=1\n") == 1);
    let status = gateway.child.wait_exit(BOUND);
    assert!(status.success(), "{status}: {}", gateway.log_text());

    let states: Vec<&String> = messages.iter().filter(|m| *m != "WATCHDOG=1\n").collect();
    assert_eq!(states.len(), 4, "{messages:?}");
    assert_eq!(states[0], "READY=1\n");
    let reloading: Vec<&str> = states[1].lines().collect();
    assert_eq!(reloading[0], "RELOADING=1", "{messages:?}");
    let usec = reloading
        .get(1)
        .and_then(|line| line.strip_prefix("MONOTONIC_USEC="))
        .and_then(|value| value.parse::<u64>().ok());
    assert!(usec.is_some_and(|usec| usec > 0), "{messages:?}");
    assert_eq!(states[2], "READY=1\n");
    assert_eq!(states[3], "STOPPING=1\n");
}
