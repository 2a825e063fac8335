//! The README's quickstart walkthrough, run as written: the quickstart
//! manifest served by a real gateway (on a free port, with its certificate
//! in a temp folder), and every `curl` line of the walkthrough run by bash
//! with the real curl. Each line whose comment starts with a status code
//! must get that code, so the README cannot drift from what the gateway
//! answers.

use std::path::Path;
use std::process::Stdio;

use crate::support::*;

const CURL: &str = "/usr/bin/curl";

/// One command of the walkthrough, with the status code its comment names.
#[derive(Debug)]
struct Step {
    command: String,
    expected: Option<u16>,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The shell block under "## Try the quickstart".
fn walkthrough(readme: &str) -> Vec<String> {
    let section = readme
        .split("## Try the quickstart")
        .nth(1)
        .expect("the README has a \"Try the quickstart\" section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the section has a sh block");
    block.lines().map(str::to_owned).collect()
}

/// The block's assignments, and its commands with continuation lines
/// joined and a comment on a line of its own given to the command above.
fn steps(lines: &[String]) -> (Vec<String>, Vec<Step>) {
    let mut assignments = Vec::new();
    let mut steps: Vec<Step> = Vec::new();
    let mut pending = String::new();
    for line in lines {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            if let Some(step) = steps.last_mut() {
                step.expected = step.expected.or_else(|| status_in(comment));
            }
            continue;
        }
        let (code, comment) = match line.split_once(" # ") {
            Some((code, comment)) => (code.trim_end(), Some(comment)),
            None => (line.trim_end(), None),
        };
        if let Some(continued) = code.strip_suffix('\\') {
            pending.push_str(continued);
            continue;
        }
        let command = format!("{pending}{code}").trim().to_owned();
        pending.clear();
        if command.starts_with("curl ") {
            steps.push(Step {
                command,
                expected: comment.and_then(status_in),
            });
        } else {
            assignments.push(command);
        }
    }
    (assignments, steps)
}

/// `403` in ` 403: system:anonymous may not ...`.
fn status_in(comment: &str) -> Option<u16> {
    let word = comment.trim().split(':').next()?;
    (word.len() == 3).then(|| word.parse().ok()).flatten()
}

/// The quickstart manifest on a free port, its certificate kept in `dir`,
/// its components found where the example names them.
fn quickstart_in(dir: &Path) -> String {
    let example = std::fs::read_to_string(repo().join("examples/quickstart.toml"))
        .expect("read examples/quickstart.toml");
    let address = "address = \"127.0.0.1:8443\"";
    assert!(example.contains(address), "the quickstart listens on 8443");
    let certs = dir.join("certs");
    let dist = repo().join("filters/dist");
    example
        .replace(
            address,
            &format!(
                "address = \"127.0.0.1:0\"\ncert_dir = \"{}\"",
                certs.display()
            ),
        )
        .replace("\"../filters/dist/", &format!("\"{}/", dist.display()))
}

/// Runs `script` with bash, `HOME` at `home` and no proxy in the way of
/// curl (the gateway is on 127.0.0.1).
async fn run_curl_script(what: &str, script: &str, home: &Path) -> std::process::Output {
    bounded(
        what,
        tokio::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .env("HOME", home)
            .env("NO_PROXY", "*")
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("run bash")
}

#[tokio::test]
async fn the_readme_walkthrough_answers_as_it_says() {
    crate::support::build_filters();
    let curl = require_program(CURL);
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("read README.md");
    let (assignments, steps) = steps(&walkthrough(&readme));
    assert!(
        steps.iter().filter(|step| step.expected.is_some()).count() >= 8,
        "the walkthrough's curl lines with a status: {steps:#?}"
    );
    let dir = new_dir();
    let manifest = quickstart_in(dir.path());
    let gateway = TestGateway::start_in(new_dir(), &manifest).await;
    let base = gateway.url("");

    // One bash script: the block's own assignments (G pointed at this
    // gateway), then each curl line as written, printing its status code.
    let mut script = String::from("set -u\n");
    for assignment in &assignments {
        match assignment.strip_prefix("G=") {
            Some(_) => script.push_str(&format!("G={base}\n")),
            None => script.push_str(&format!("{assignment}\n")),
        }
    }
    for step in &steps {
        let command = step
            .command
            .replacen("curl ", &format!("{} ", curl.display()), 1);
        script.push_str(&format!(
            "{command} -s -o /dev/null -w '%{{http_code}}\\n' || echo failed\n"
        ));
    }
    let output = run_curl_script("the walkthrough's curl lines", &script, dir.path()).await;
    let answers = String::from_utf8_lossy(&output.stdout);
    let codes: Vec<&str> = answers.lines().collect();
    assert_eq!(codes.len(), steps.len(), "{answers}\n{script}");
    for (step, code) in steps.iter().zip(codes) {
        match step.expected {
            Some(expected) => assert_eq!(code, expected.to_string(), "{}", step.command),
            // A line without a code still gets an answer, never an error.
            None => assert!(code.starts_with('2'), "{}: {code}", step.command),
        }
    }
}

/// The blocks of the README's "An upstream sees the user": the upstream's
/// command, the curl line, and the answer it shows.
struct EchoWalkthrough {
    upstream: String,
    curl: String,
    answer: String,
}

fn echo_walkthrough(readme: &str) -> EchoWalkthrough {
    let section = readme
        .split("### An upstream sees the user")
        .nth(1)
        .expect("the README has an \"An upstream sees the user\" section");
    // The section's first three blocks; the quickstart's own text follows.
    let blocks: Vec<&str> = section
        .split("```")
        .skip(1)
        .step_by(2)
        .take(3)
        .map(|block| block.split_once('\n').map_or("", |(_, text)| text))
        .collect();
    match blocks.as_slice() {
        [upstream, curl, answer] => EchoWalkthrough {
            upstream: upstream.trim().to_owned(),
            curl: curl.trim().to_owned(),
            answer: (*answer).to_owned(),
        },
        _ => panic!(
            "the section has the upstream's command, a curl line and the answer: {blocks:#?}"
        ),
    }
}

/// The section's commands as written: the echo upstream started with its
/// command (on a free port, its one argument), the quickstart pointed at
/// it, the curl line run by bash with the real curl; the upstream answers
/// exactly what the README shows.
#[tokio::test]
async fn the_readme_echo_upstream_sees_the_user_not_the_clients_credentials() {
    use tokio::io::AsyncBufReadExt;

    crate::support::build_filters();
    let curl = require_program(CURL);
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("read README.md");
    let walkthrough = echo_walkthrough(&readme);

    let mut upstream = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!("exec {} 0", walkthrough.upstream))
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the echo upstream");
    let stdout = upstream.stdout.take().expect("the upstream's stdout");
    let mut listening = String::new();
    bounded(
        "the echo upstream's first line",
        tokio::io::BufReader::new(stdout).read_line(&mut listening),
    )
    .await
    .expect("read the upstream's stdout");
    let url = listening
        .trim()
        .strip_prefix("echo upstream on ")
        .unwrap_or_else(|| panic!("the upstream says where it listens: {listening:?}"));

    let dir = new_dir();
    let quickstart = quickstart_in(dir.path());
    let route = "\"http://127.0.0.1:9000\"";
    assert!(
        quickstart.contains(route),
        "the quickstart routes /echo/ to 9000"
    );
    let manifest = quickstart.replace(route, &format!("\"{url}\""));
    let gateway = TestGateway::start_in(new_dir(), &manifest).await;

    let command = walkthrough
        .curl
        .replacen("curl ", &format!("{} -s ", curl.display()), 1);
    let script = format!("set -u\nG={}\n{command}", gateway.url(""));
    let output = run_curl_script("the README's curl line", &script, dir.path()).await;
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        walkthrough.answer,
        "{command}"
    );
}
