//! `wasmgate new-filter`: writes a new filter's folder, in Rust, Python,
//! JavaScript or C, for one of the five filter worlds, that builds with
//! `filters/build.sh` and passes `wasmgate try` unchanged.
//!
//! The sources come from `filters/templates/` (embedded here with
//! `include_str!`), with `{{name}}`-style placeholders filled in. Every
//! scaffold reads its config (a config that is not a JSON object is its error
//! outcome), logs one `debug` line, and answers the most neutral thing its
//! world has: an authenticator has no opinion, an authorizer allows, an
//! admission filter allows the object, an auditor writes one JSON line per
//! event to its sink, a json auditor appends the batch's lines (rendered by
//! the gateway) to its sink as they are. Beside the sources it writes a README and a `try.toml`
//! manifest that runs it.
//!
//! A Rust filter is written with the checkout's filter SDK
//! (`filters/rust/sdk`, crate `wasmgate-filter`). In a checkout the folder
//! is `filters/<lang>/<name>/`, which `filters/build.sh` picks up by itself
//! (Rust crates there are workspace members by a glob, and depend on the SDK
//! through the workspace). Elsewhere (`--dir`), a Rust crate is a workspace
//! of its own with a copy of the SDK (and of the WIT, in the SDK's `wit/`),
//! and the build command names the folder and a `dist/` beside the sources.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The languages a filter can be scaffolded in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, on the filter SDK.
    Rust,
    /// Python, through componentize-py.
    Python,
    /// JavaScript, through ComponentizeJS.
    Js,
    /// C, through wit-bindgen and wasi-sdk.
    C,
}

/// The filter kinds of the contract, `wit/filter-0.4.0.wit`, one a world:
/// the four record worlds and the serialised auditor, `json-auditor-filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FilterKind {
    /// Says who sent the request.
    Authenticator,
    /// Says whether the user may make the request.
    Authorizer,
    /// Admits, denies or patches a write.
    Admission,
    /// Records audit events, given as records.
    Auditor,
    /// Records audit events, given as kube's audit log lines.
    JsonAuditor,
}

impl Lang {
    pub(crate) const ALL: [Lang; 4] = [Lang::Rust, Lang::Python, Lang::Js, Lang::C];

    /// The folder under `filters/` (and the `--lang` value).
    pub(crate) fn folder(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
            Lang::C => "c",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
            Lang::C => "C",
        }
    }

    /// Interpreted languages pay a millisecond or so for a call on a fresh
    /// instance and tens of microseconds on a reused one (bench/README.md):
    /// their scaffolds are pooled.
    fn isolation_line(self) -> &'static str {
        match self {
            Lang::Python | Lang::Js => {
                "# An interpreter: a call costs 0.6-1.5 ms on a fresh instance, 14-110 µs on a\n# reused one (the shipped filters, measured in the checkout's bench/README.md).\nisolation = \"pooled\"\n"
            }
            Lang::Rust | Lang::C => "isolation = \"per-request\"\n",
        }
    }
}

impl FilterKind {
    /// The kind's name, as `--kind` spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FilterKind::Authenticator => "authenticator",
            FilterKind::Authorizer => "authorizer",
            FilterKind::Admission => "admission",
            FilterKind::Auditor => "auditor",
            FilterKind::JsonAuditor => "json-auditor",
        }
    }

    /// The WIT world.
    pub(crate) fn world(self) -> String {
        format!("{}-filter", self.name())
    }

    /// What the scaffold answers, for its README.
    fn behaviour(self) -> &'static str {
        match self {
            FilterKind::Authenticator => {
                "has no opinion on any request (so, in `try.toml`, the request goes on as `system:anonymous`)"
            }
            FilterKind::Authorizer => "allows every request",
            FilterKind::Admission => "allows every object",
            FilterKind::Auditor => "writes one JSON line per audit event to its sink and succeeds",
            FilterKind::JsonAuditor => {
                "appends the batch's lines (kube's `audit.k8s.io/v1` `Event`s, one JSON object a line, rendered by the gateway) to its sink in one `write-lines` call and succeeds"
            }
        }
    }

    /// What `wasmgate try` on the scaffold's `try.toml` shows.
    fn expected(self) -> &'static str {
        match self {
            FilterKind::Authenticator => {
                "The report's `filters` show the filter's `answer` with detail `no opinion`, the user is `system:anonymous` and the status 200."
            }
            FilterKind::Authorizer => {
                "The report's `filters` show the filter's `answer` with detail `allow`, and the status is 200. The `fallback` authorizer listed after it (the shipped rbac-authz, built with it) is asked only about what the filter has no opinion on, and allows it: see `try.toml`."
            }
            FilterKind::Admission => {
                "The report's `filters` show the filter's `answer` with detail `allowed`, and the status is 200."
            }
            FilterKind::Auditor => {
                "Before the report, standard output carries the filter's two records (stages `RequestReceived` and `ResponseComplete`); the status is 200."
            }
            FilterKind::JsonAuditor => {
                "Before the report, standard output carries the two lines the filter wrote: kube `Event`s of stages `RequestReceived` and `ResponseComplete`; the status is 200."
            }
        }
    }

    fn try_manifest(self) -> &'static str {
        match self {
            FilterKind::Authenticator => {
                include_str!("../filters/templates/try-authenticator.toml")
            }
            FilterKind::Authorizer => include_str!("../filters/templates/try-authorizer.toml"),
            FilterKind::Admission => include_str!("../filters/templates/try-admission.toml"),
            FilterKind::Auditor => include_str!("../filters/templates/try-auditor.toml"),
            FilterKind::JsonAuditor => include_str!("../filters/templates/try-json-auditor.toml"),
        }
    }
}

/// The filter's source files for a language and kind: (path in the folder, template).
fn sources(lang: Lang, kind: FilterKind, in_tree: bool) -> Vec<(&'static str, &'static str)> {
    use FilterKind::*;
    match lang {
        Lang::Rust => {
            let lib = match kind {
                Authenticator => include_str!("../filters/templates/rust/authenticator.rs"),
                Authorizer => include_str!("../filters/templates/rust/authorizer.rs"),
                Admission => include_str!("../filters/templates/rust/admission.rs"),
                Auditor => include_str!("../filters/templates/rust/auditor.rs"),
                JsonAuditor => include_str!("../filters/templates/rust/json-auditor.rs"),
            };
            let manifest = if in_tree {
                include_str!("../filters/templates/rust/Cargo.toml")
            } else {
                include_str!("../filters/templates/rust/Cargo.standalone.toml")
            };
            vec![("Cargo.toml", manifest), ("src/lib.rs", lib)]
        }
        Lang::Python => vec![(
            "app.py",
            match kind {
                Authenticator => include_str!("../filters/templates/python/authenticator.py"),
                Authorizer => include_str!("../filters/templates/python/authorizer.py"),
                Admission => include_str!("../filters/templates/python/admission.py"),
                Auditor => include_str!("../filters/templates/python/auditor.py"),
                JsonAuditor => include_str!("../filters/templates/python/json-auditor.py"),
            },
        )],
        Lang::Js => vec![
            (
                "filter.js",
                match kind {
                    Authenticator => include_str!("../filters/templates/js/authenticator.js"),
                    Authorizer => include_str!("../filters/templates/js/authorizer.js"),
                    Admission => include_str!("../filters/templates/js/admission.js"),
                    Auditor => include_str!("../filters/templates/js/auditor.js"),
                    JsonAuditor => include_str!("../filters/templates/js/json-auditor.js"),
                },
            ),
            (
                "package.json",
                include_str!("../filters/templates/js/package.json"),
            ),
        ],
        Lang::C => vec![(
            "filter.c",
            match kind {
                Authenticator => include_str!("../filters/templates/c/authenticator.c"),
                Authorizer => include_str!("../filters/templates/c/authorizer.c"),
                Admission => include_str!("../filters/templates/c/admission.c"),
                Auditor => include_str!("../filters/templates/c/auditor.c"),
                JsonAuditor => include_str!("../filters/templates/c/json-auditor.c"),
            },
        )],
    }
}

/// The shipped authorizer an authorizer's `try.toml` lists after the new
/// one, so that its no-opinion is allowed rather than the union's 403 (see
/// `filters/templates/try-authorizer.toml`); its build command builds it too.
const FALLBACK_AUTHORIZER: &str = "filters/rust/rbac-authz";

/// The folder a Rust crate outside the checkout gets the filter SDK in (its
/// `Cargo.toml` depends on it by this path).
const SDK_COPY: &str = "wasmgate-filter/";

/// The filter SDK's files, copied as they are beside a Rust crate outside the
/// checkout: the crate `filters/rust/sdk`, with the WIT in its `wit/` (a
/// link to the checkout's `wit/` there).
const SDK_FILES: [(&str, &str); 7] = [
    ("Cargo.toml", include_str!("../filters/rust/sdk/Cargo.toml")),
    ("src/lib.rs", include_str!("../filters/rust/sdk/src/lib.rs")),
    (
        "src/arena.rs",
        include_str!("../filters/rust/sdk/src/arena.rs"),
    ),
    (
        "src/config.rs",
        include_str!("../filters/rust/sdk/src/config.rs"),
    ),
    (
        "src/headers.rs",
        include_str!("../filters/rust/sdk/src/headers.rs"),
    ),
    ("src/log.rs", include_str!("../filters/rust/sdk/src/log.rs")),
    (
        "wit/filter-0.4.0.wit",
        include_str!("../wit/filter-0.4.0.wit"),
    ),
];

/// What to scaffold.
#[derive(Clone, Debug)]
pub struct NewFilter {
    /// The filter's language.
    pub lang: Lang,
    /// The filter's world.
    pub kind: FilterKind,
    /// The filter's name: its folder, its crate or package, its component
    /// (`<name>.wasm`) and its name in `try.toml`.
    pub name: String,
    /// The folder to create the filter's folder in; default
    /// `<checkout>/filters/<lang>`.
    pub parent: Option<PathBuf>,
    /// The wasmgate checkout (for `filters/build.sh`); found from the current
    /// folder up when not given.
    pub checkout: Option<PathBuf>,
}

/// What was written, and how to build and try it.
#[derive(Clone, Debug)]
pub struct Scaffolded {
    /// The filter's folder.
    pub dir: PathBuf,
    /// The files written, inside it.
    pub files: Vec<PathBuf>,
    /// Whether the folder is `<checkout>/filters/<lang>/<name>`.
    pub in_tree: bool,
    /// Where `filters/build.sh` puts the component.
    pub component: PathBuf,
    /// The checkout the commands run from, when known.
    pub checkout: Option<PathBuf>,
    /// The build command (run from the checkout).
    pub build: String,
    /// The `wasmgate try` command (run from the checkout).
    pub try_command: String,
}

/// Why a filter could not be scaffolded.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error(
        "{0:?} is not a filter name: use lower-case letters, digits and '-', starting with a letter, at most 63 characters"
    )]
    /// The name is not a valid filter name.
    Name(String),
    #[error(
        "no wasmgate checkout (a folder with filters/build.sh and wit/filter.wit) here or above: give --dir"
    )]
    /// No checkout was given or found.
    NoCheckout,
    /// The filter's folder exists and holds files.
    #[error("{} exists already and is not empty", .0.display())]
    Exists(PathBuf),
    #[error("a filter named {name:?} exists already in {}: components are named after their folders", .other.display())]
    /// Another filter of the same name exists in the tree.
    Taken {
        /// The name.
        name: String,
        /// The other filter's folder.
        other: PathBuf,
    },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why it could not be written.
        #[source]
        source: std::io::Error,
    },
}

/// Whether `name` can name a filter (a folder, a crate, a component file).
pub(crate) fn valid_name(name: &str) -> bool {
    name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The wasmgate checkout at or above `start`: the first folder with
/// `filters/build.sh` and `wit/filter.wit`.
pub(crate) fn find_checkout(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join("filters/build.sh").is_file() && dir.join("wit/filter.wit").is_file())
        .map(Path::to_path_buf)
}

/// Writes the filter's folder.
pub fn scaffold(request: &NewFilter) -> Result<Scaffolded, ScaffoldError> {
    let NewFilter {
        lang, kind, name, ..
    } = request;
    let (lang, kind) = (*lang, *kind);
    if !valid_name(name) {
        return Err(ScaffoldError::Name(name.clone()));
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let checkout = request
        .checkout
        .clone()
        .or_else(|| find_checkout(&cwd))
        .map(|dir| absolute(&dir));
    let parent = match (&request.parent, &checkout) {
        (Some(parent), _) => absolute(parent),
        (None, Some(checkout)) => checkout.join("filters").join(lang.folder()),
        (None, None) => return Err(ScaffoldError::NoCheckout),
    };
    let dir = parent.join(name);
    let in_tree = checkout
        .as_ref()
        .is_some_and(|checkout| same_dir(&parent, &checkout.join("filters").join(lang.folder())));
    if dir.exists() && std::fs::read_dir(&dir).map_or(true, |mut entries| entries.next().is_some())
    {
        return Err(ScaffoldError::Exists(dir));
    }
    if in_tree && let Some(checkout) = &checkout {
        for other in Lang::ALL {
            let taken = checkout.join("filters").join(other.folder()).join(name);
            if taken.exists() && other != lang {
                return Err(ScaffoldError::Taken {
                    name: name.clone(),
                    other: taken,
                });
            }
        }
    }

    let shown = |path: &Path| -> String {
        match &checkout {
            Some(checkout) => path
                .strip_prefix(checkout)
                .unwrap_or(path)
                .display()
                .to_string(),
            None => path.display().to_string(),
        }
    };
    // A checkout's file as the build command names it: relative when the
    // command runs from the checkout, else from the checkout found.
    let in_checkout = |relative: &str| -> String {
        match (&checkout, in_tree) {
            (Some(checkout), false) => checkout.join(relative).display().to_string(),
            _ => relative.to_owned(),
        }
    };
    let also_built = match kind {
        FilterKind::Authorizer => format!("{} ", in_checkout(FALLBACK_AUTHORIZER)),
        _ => String::new(),
    };
    let (component, dist_in_manifest, build) =
        if let Some(checkout) = checkout.as_ref().filter(|_| in_tree) {
            (
                checkout.join("filters/dist").join(format!("{name}.wasm")),
                "../../dist",
                format!("filters/build.sh {also_built}{}", shown(&dir)),
            )
        } else {
            (
                dir.join("dist").join(format!("{name}.wasm")),
                "dist",
                format!(
                    "{} --dist {} {also_built}{}",
                    in_checkout("filters/build.sh"),
                    dir.join("dist").display(),
                    dir.display()
                ),
            )
        };
    let manifest = dir.join("try.toml");
    let mut try_command = format!("wasmgate try --config {}", shown(&manifest));
    if kind == FilterKind::Admission {
        let _ = write!(
            try_command,
            " --method POST --path /apis/example.com/v1/namespaces/default/things -H 'Content-Type: application/json' --body {}",
            shown(&dir.join("object.json"))
        );
    } else {
        try_command.push_str(" --path /apis/example.com/v1/namespaces/default/things");
    }

    let fill = |template: &str| -> String {
        template
            .replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{kind}}", kind.name())
            .replace("{{component}}", &format!("{dist_in_manifest}/{name}.wasm"))
            .replace("{{dist}}", dist_in_manifest)
            .replace("{{isolation_line}}", lang.isolation_line())
            .replace("{{try}}", &try_command)
    };
    let mut files: Vec<(String, String)> = sources(lang, kind, in_tree)
        .into_iter()
        .map(|(path, template)| (path.to_owned(), fill(template)))
        .collect();
    files.push(("try.toml".to_owned(), fill(kind.try_manifest())));
    if kind == FilterKind::Admission {
        files.push((
            "object.json".to_owned(),
            include_str!("../filters/templates/object.json").to_owned(),
        ));
    }
    let mut listed: Vec<String> = files.iter().map(|(path, _)| path.clone()).collect();
    if lang == Lang::Rust && !in_tree {
        listed.push(SDK_COPY.to_owned());
        files.extend(
            SDK_FILES
                .iter()
                .map(|(path, text)| (format!("{SDK_COPY}{path}"), (*text).to_owned())),
        );
    }
    files.push((
        "README.md".to_owned(),
        readme(lang, kind, name, &listed, &build, &try_command, in_tree),
    ));

    let mut written = Vec::new();
    for (relative, text) in files {
        let path = dir.join(&relative);
        let result = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, text));
        result.map_err(|source| ScaffoldError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(Scaffolded {
        dir,
        files: written,
        in_tree,
        component,
        checkout,
        build,
        try_command,
    })
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The README's section on how the filter fails and how its author sees why.
fn failures(lang: Lang, kind: FilterKind) -> String {
    let error = match kind {
        FilterKind::Authenticator => {
            "the `error` case: logged, never shown to the client, and the request goes on to the next authenticator (then 401)"
        }
        FilterKind::Auditor | FilterKind::JsonAuditor => {
            "`err`: logged and counted; audit never fails a request"
        }
        FilterKind::Authorizer | FilterKind::Admission => {
            "`err`: the filter's `failure_policy` decides (fail-closed: a 500 Status)"
        }
    };
    let how = match lang {
        Lang::Python => {
            "Any exception `app.py` raises (or what it calls raises) is this filter's error outcome, with the
exception's type, message and line: `ValueError: no rule (at app.py:31)`; `raise Err(message)`
gives `message` as it is. `MemoryError` and `RecursionError` stay traps (the interpreter is out of
memory or stack)."
        }
        Lang::Js => {
            "Any value `filter.js` throws is this filter's error outcome: an `Error` as its name, message and
place (`Error: no key (at filter.js:12:9)`), a string as it is. SpiderMonkey's `InternalError`
(too much recursion) stays a trap."
        }
        Lang::Rust => {
            "Return the error case to fail; a panic is a trap, and its message (on stderr) is in the trap's
detail."
        }
        Lang::C => "Return the error case to fail; `abort()` or a bad memory access is a trap.",
    };
    let print = match lang {
        Lang::Python => "`print(..., file=sys.stderr)`",
        Lang::Js => "`console.error(...)`",
        Lang::Rust => "`eprintln!`",
        Lang::C => "`fprintf(stderr, ...)`",
    };
    format!(
        "## Errors, traps and prints\n\n{how} The error outcome is {error}. A trap throws the instance\naway; the failure policy decides about the request.\n\nWhat the filter writes to stderr ({print}) during a call that traps is in the trap's detail in\n`wasmgate try` (its last 4 KiB) and in the gateway's trap log line. To see every line as it is\nwritten, grant the standard streams in `try.toml`: `wasi = {{ stdio = true }}` in the filter's\ntable. `host.log` lines go to the gateway's log (`RUST_LOG=wasmgate::filter=debug` for `debug`).\n"
    )
}

fn readme(
    lang: Lang,
    kind: FilterKind,
    name: &str,
    files: &[String],
    build: &str,
    try_command: &str,
    in_tree: bool,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {name}\n");
    let _ = writeln!(
        out,
        "{} **{}** filter (world `{}`) in {}, scaffolded by `wasmgate new-filter`.\nAs scaffolded it {}. It reads its `config` table (a config that is not a\nJSON object is its error outcome) and logs one line at `debug`.\n",
        // Every kind's name but `json-auditor` starts with a vowel.
        if kind == FilterKind::JsonAuditor {
            "A"
        } else {
            "An"
        },
        kind.name(),
        kind.world(),
        lang.title(),
        kind.behaviour()
    );
    let _ = writeln!(out, "## Files\n");
    for file in files {
        let what = match file.as_str() {
            "Cargo.toml" => "the crate (a `cdylib`, built for `wasm32-wasip2`)",
            "src/lib.rs" => {
                "the filter: its config type and its `Guest` implementation, exported with the SDK's `export!`"
            }
            SDK_COPY => {
                "a copy of the checkout's filter SDK (`filters/rust/sdk`), with the filter contract in its `wit/` (this crate lives outside the checkout)"
            }
            "app.py" => {
                "the filter: componentize-py generates the `wit_world` bindings at build time"
            }
            "filter.js" => {
                "the filter: componentize-js binds its imports and its export at build time"
            }
            "package.json" => {
                "marks the sources as ES modules (for `node --test`); no dependencies"
            }
            "filter.c" => "the filter: `wit-bindgen c` generates the header at build time",
            "try.toml" => "a manifest that runs this filter, for `wasmgate try`",
            "object.json" => "an object to send with `wasmgate try`",
            _ => "",
        };
        let _ = writeln!(out, "- `{file}`: {what}");
    }
    let _ = writeln!(
        out,
        "\n## Build\n\nFrom the wasmgate checkout:\n\n```sh\n{build}\n```\n"
    );
    let tools = match lang {
        Lang::Rust => "`cargo` for `wasm32-wasip2` (the target is installed when missing)",
        Lang::Python => "componentize-py, installed on first use into `~/.cache/wasmgate/tools`",
        Lang::Js => {
            "componentize-js (its own CLI, with the WASI features `http` and `fetch-event` disabled so the component imports nothing the host does not link), installed on first use into `~/.cache/wasmgate/tools`"
        }
        Lang::C => {
            "Debian's clang with wasi-libc (installed with apt-get when missing), `wit-bindgen c` and `wasm-tools component new` with the WASI preview-1 adapter (installed on first use into `~/.cache/wasmgate/tools`)"
        }
    };
    let _ = writeln!(
        out,
        "`filters/build.sh` builds it with {tools}, and prints the component's path{}.\n",
        if in_tree {
            format!(
                " (`filters/dist/{name}.wasm`); a plain `filters/build.sh` builds it with every other filter"
            )
        } else {
            String::new()
        }
    );
    if matches!(lang, Lang::Python | Lang::Js) {
        let _ = writeln!(
            out,
            "A syntax error stops the build with `file:line:column: message`, the line and a caret.\n"
        );
    }
    let _ = writeln!(
        out,
        "## Try\n\n```sh\n{try_command}\n```\n\n{}\n",
        kind.expected()
    );
    let _ = writeln!(out, "{}", failures(lang, kind));
    if matches!(lang, Lang::Python | Lang::Js) {
        let _ = writeln!(
            out,
            "`try.toml` sets `isolation = \"pooled\"`: a {} component starts an interpreter: a call costs\n0.6-1.5 ms on a fresh instance and 14-110 µs on a reused one (the shipped filters, measured in\nthe checkout's `bench/README.md`).\n",
            lang.title()
        );
    }
    let _ = writeln!(
        out,
        "## Next\n\n`docs/writing-filters.md` in the checkout: the contract, what each answer does, the four\noutcomes of a call, isolation and budgets, and the section on {}.",
        lang.title()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["a", "my-filter", "authz2", "x-1-y"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "1a", "-a", "a-", "My", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_sdk_copy_has_every_source_of_the_sdk() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("filters/rust/sdk/src");
        let mut sources: Vec<String> = std::fs::read_dir(&src)
            .expect("read the SDK's src/")
            .map(|entry| {
                format!(
                    "src/{}",
                    entry.expect("an entry").file_name().to_string_lossy()
                )
            })
            .collect();
        sources.sort();
        let mut copied: Vec<String> = SDK_FILES
            .iter()
            .map(|(path, _)| (*path).to_owned())
            .filter(|path| path.starts_with("src/"))
            .collect();
        copied.sort();
        assert_eq!(copied, sources);
    }

    #[test]
    fn every_template_is_filled() {
        let dir =
            std::env::temp_dir().join(format!("wasmgate-scaffold-unit-{}", std::process::id()));
        for lang in Lang::ALL {
            for &kind in <FilterKind as clap::ValueEnum>::value_variants() {
                let name = format!("{}-{}", lang.folder(), kind.name());
                let made = scaffold(&NewFilter {
                    lang,
                    kind,
                    name: name.clone(),
                    parent: Some(dir.clone()),
                    checkout: None,
                })
                .expect("scaffold");
                for file in &made.files {
                    let text = std::fs::read_to_string(file).expect("read");
                    assert!(
                        !text.contains("{{"),
                        "{} keeps a placeholder",
                        file.display()
                    );
                }
                assert!(
                    made.build.ends_with(&made.dir.display().to_string()),
                    "{}",
                    made.build
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
