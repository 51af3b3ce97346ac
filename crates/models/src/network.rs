//! Why a request did not reach the hub, read from reqwest's error and its causes, so that being
//! offline reads as that rather than as a resolver's or a socket's own words.

use std::error::Error;
use std::io::ErrorKind;

/// What kept a request from the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkFailure {
    /// The hub's name did not resolve (no DNS: offline, or a typo in `HF_ENDPOINT`).
    NameNotResolved,
    /// Nothing listens at the address (a mirror that is down).
    Refused,
    /// No answer in time.
    TimedOut,
    /// Any other failure to connect or to read the answer.
    Other,
}

impl NetworkFailure {
    pub fn of(error: &reqwest::Error) -> Self {
        if error.is_timeout() {
            return Self::TimedOut;
        }
        let mut cause: Option<&(dyn Error + 'static)> = Some(error);
        while let Some(inner) = cause {
            if let Some(io) = inner.downcast_ref::<std::io::Error>() {
                match io.kind() {
                    ErrorKind::ConnectionRefused => return Self::Refused,
                    ErrorKind::TimedOut => return Self::TimedOut,
                    _ => {}
                }
            }
            // hyper-util says "dns error" for a name that did not resolve; the resolver's own
            // error below it has no kind of its own.
            if inner.to_string().starts_with("dns error") {
                return Self::NameNotResolved;
            }
            cause = inner.source();
        }
        Self::Other
    }

    /// What happened, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::NameNotResolved => "its name does not resolve",
            Self::Refused => "the connection was refused",
            Self::TimedOut => "it did not answer in time",
            Self::Other => "the connection failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn failure_of(url: &str, client: reqwest::Client) -> NetworkFailure {
        let err = client.get(url).send().await.unwrap_err();
        NetworkFailure::of(&err)
    }

    #[tokio::test]
    async fn a_closed_port_is_a_refused_connection() {
        // Port 1 on loopback: nothing listens there.
        let failure = failure_of("http://127.0.0.1:1/api/models", reqwest::Client::new()).await;
        assert_eq!(failure, NetworkFailure::Refused);
    }

    #[tokio::test]
    async fn a_name_that_cannot_resolve_is_said_so() {
        // `.invalid` never resolves (RFC 6761), online or off.
        let failure = failure_of("http://hub.invalid/api/models", reqwest::Client::new()).await;
        assert_eq!(failure, NetworkFailure::NameNotResolved);
    }

    #[tokio::test]
    async fn a_server_that_never_answers_timed_out() {
        // Accepts the connection and says nothing.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(socket);
        });
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let failure = failure_of(&format!("http://{address}/api/models"), client).await;
        held.abort();
        assert_eq!(failure, NetworkFailure::TimedOut);
    }
}
