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
    let output = bounded(
        "the walkthrough's curl lines",
        tokio::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env("HOME", dir.path())
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
    .expect("run bash");
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
