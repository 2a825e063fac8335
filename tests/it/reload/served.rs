//! What the reload tests read: which chain answered `GET /which`, polled
//! until the expected one does.

use std::time::{Duration, Instant};

use super::manifests::WATCH_BOUND;

use crate::support::{bounded, error_chain};

/// What `GET /which` answered: status, body, `x-chain` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub status: u16,
    pub body: String,
    pub chain: Option<String>,
}

impl Served {
    /// A whole answer of chain `which`: 200, body and header both `which`.
    pub fn is(&self, which: &str) -> bool {
        self.status == 200 && self.body == which && self.chain.as_deref() == Some(which)
    }
}

/// `GET url`, errors returned (with their causes) rather than panicking.
pub async fn try_served(client: &reqwest::Client, url: &str) -> Result<Served, String> {
    let response = client.get(url).send().await.map_err(|e| error_chain(&e))?;
    let status = response.status().as_u16();
    let chain = response
        .headers()
        .get("x-chain")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = response.text().await.map_err(|e| error_chain(&e))?;
    Ok(Served {
        status,
        body,
        chain,
    })
}

/// `GET url`, which must succeed.
pub async fn served(client: &reqwest::Client, url: &str) -> Served {
    match bounded("a response", try_served(client, url)).await {
        Ok(served) => served,
        Err(error) => panic!("GET {url} failed: {error}"),
    }
}

/// Polls `GET url` every few milliseconds until chain `which` answers,
/// failing after [`WATCH_BOUND`].
pub async fn wait_until_served(client: &reqwest::Client, url: &str, which: &str) {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < WATCH_BOUND {
        let answer = try_served(client, url).await;
        if matches!(&answer, Ok(served) if served.is(which)) {
            return;
        }
        last = Some(answer);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("chain {which} was not served within {WATCH_BOUND:?}; last answer: {last:?}");
}
