//! The manifests of the reload tests and how they are written: two chains
//! that answer "A" or "B" on `GET /which` (body and `x-chain` header),
//! invalid versions that would answer "C", and edits made as tools and
//! Kubernetes make them (the editors' atomic save is
//! `support::write_atomically`).

use std::path::Path;
use std::time::Duration;

use crate::support::{component_path, plaintext, which_route};

/// How long a change seen only through the file watcher may take to be
/// served (the watcher debounces for 200 ms; a loaded machine is slower).
pub const WATCH_BOUND: Duration = Duration::from_secs(10);

/// The series the reload tests read at `/metrics`.
pub const RELOAD_SUCCESSES: &str = r#"wasmgate_config_reload_total{result="success"}"#;
pub const RELOAD_FAILURES: &str = r#"wasmgate_config_reload_total{result="failure"}"#;
pub const LAST_RELOAD_SUCCESS: &str = "wasmgate_config_last_reload_success_timestamp_seconds";
pub const COMPONENTS_FROM_MEMORY: &str = r#"wasmgate_components_loaded_total{source="memory"}"#;

/// A plaintext gateway on 127.0.0.1:0 whose chain answers `which`.
pub fn chain(which: &str) -> String {
    plaintext(&format!(
        "[[servers]]\nname = \"main\"\n\n{}",
        which_route(which)
    ))
}

/// Invalid: the TOML does not parse (an inline table left open). Were it
/// taken, `/which` would answer "C".
pub fn broken_toml() -> String {
    plaintext(&format!(
        "[[servers]]\nname = \"main\"\n\n{}\n[[servers.routes]]\npath = \"/broken\"\nstatic = {{ body = \"C\"\n",
        which_route("C")
    ))
}

/// Invalid: a route proxies to an ftp:// URL. Were it taken, `/which` would
/// answer "C".
pub fn bad_upstream() -> String {
    plaintext(&format!(
        "[[servers]]\nname = \"main\"\n\n{}\n[[servers.routes]]\nprefix = \"/bad/\"\nupstream = \"ftp://127.0.0.1:21\"\n",
        which_route("C")
    ))
}

/// Invalid once the components are loaded: the authenticator's component
/// file does not exist. Were it taken, `/which` would answer "C".
pub fn missing_component() -> String {
    plaintext(&format!(
        "[authentication]\nanonymous = true\n\n[[authentication.filters]]\nname = \"tokens\"\ncomponent = \"no-such-filter.wasm\"\n\n[authorization]\nalways_allow = true\n\n[[servers]]\nname = \"main\"\n\n{}",
        which_route("C")
    ))
}

/// Rewrites `path` in place in two writes `pause` apart, as a tool that
/// writes in pieces does: truncated, `first` written (and flushed to the
/// file, so a reader sees it), then `rest`.
pub async fn write_in_two_pieces(path: &Path, first: &str, rest: &str, pause: Duration) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .expect("open the manifest to write it in place");
    file.write_all(first.as_bytes())
        .expect("write the first piece");
    file.sync_data().expect("flush the first piece");
    tokio::time::sleep(pause).await;
    file.write_all(rest.as_bytes()).expect("write the rest");
}

/// A chain answering `which` on `/which` only to a request with a token
/// `token-authn` knows (`t1`, user alice): anonymous requests get 401. The
/// route comes first, the authentication last, so that everything before
/// `[authentication]` is a valid manifest on its own, one without
/// authentication, that would answer anyone.
pub fn token_protected(which: &str) -> String {
    format!(
        "{}[authentication]\nanonymous = false\n\n[[authentication.filters]]\nname = \"tokens\"\ncomponent = \"{}\"\n\
         config = {{ tokens = [{{ token = \"t1\", user = \"alice\" }}] }}\n\n[authorization]\nalways_allow = true\n",
        chain(which),
        component_path("token-authn").display()
    )
}

/// `ln -s target tmp && mv -T tmp link`: replaces `link` by a symlink to
/// `target` in one rename.
pub fn swap_symlink(link: &Path, target: &Path) {
    let temp = link.with_file_name(format!(
        ".{}.link-tmp",
        link.file_name().expect("a file name").to_string_lossy()
    ));
    let _ = std::fs::remove_file(&temp);
    std::os::unix::fs::symlink(target, &temp).expect("create the temp symlink");
    std::fs::rename(&temp, link).expect("rename the symlink over the manifest");
}
