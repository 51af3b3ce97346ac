//! A remote engine as the user names it: `NAME=URL[,KEY]` on the command line, or the same three
//! fields from Settings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::RemoteError;

/// Longest name and key taken.
const MAX_NAME: usize = 64;
const MAX_KEY: usize = 4096;

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSpec {
    /// How runs and menus name it: letters, digits, `.`, `_` and `-`.
    pub name: String,
    /// The server's base address, such as `http://gpu-box:8000` (a trailing `/v1` is taken off).
    pub url: String,
    /// Sent as `Authorization: Bearer KEY` when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

// The key never reaches logs.
impl fmt::Debug for RemoteSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteSpec")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "…"))
            .finish()
    }
}

impl RemoteSpec {
    /// Checks the fields and puts the address in its base form.
    pub fn new(
        name: impl Into<String>,
        url: impl Into<String>,
        api_key: Option<String>,
    ) -> Result<Self, RemoteError> {
        let name = name.into().trim().to_owned();
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(invalid(format!(
                "a name has 1 to {MAX_NAME} characters, got {}",
                name.len()
            )));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(invalid(format!(
                "'{name}' has '{bad}': a name has letters, digits, '.', '_' and '-' only"
            )));
        }
        // The history's filter names the model served here so.
        if name == "local" {
            return Err(invalid(
                "'local' names the model served here; choose another name".to_owned(),
            ));
        }
        let url = base_url(url.into().trim())?;
        let api_key = api_key
            .map(|k| k.trim().to_owned())
            .filter(|k| !k.is_empty());
        if let Some(key) = &api_key {
            if key.len() > MAX_KEY || key.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(invalid(
                    "an API key is one word of at most 4096 characters".to_owned(),
                ));
            }
        }
        Ok(Self { name, url, api_key })
    }
}

/// `NAME=URL[,KEY]`.
impl FromStr for RemoteSpec {
    type Err = RemoteError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, rest) = text.split_once('=').ok_or_else(|| {
            invalid(format!(
                "'{text}' is not NAME=URL[,KEY] (such as lab=http://gpu-box:8000)"
            ))
        })?;
        let (url, key) = match rest.split_once(',') {
            Some((url, key)) => (url, Some(key.to_owned())),
            None => (rest, None),
        };
        Self::new(name, url, key)
    }
}

/// `http(s)://host[:port][/path]` without a trailing `/` or `/v1`, no query or fragment. HTTPS
/// certificates are checked against the system's trusted roots.
fn base_url(url: &str) -> Result<String, RemoteError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid(format!(
            "'{url}' is not an address such as http://gpu-box:8000"
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(invalid(format!(
            "'{url}' uses '{scheme}': remote engines are reached over http or https"
        )));
    }
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || rest.contains(['?', '#', ' ']) || host.contains('@') {
        return Err(invalid(format!(
            "'{url}' is not an address such as http://gpu-box:8000 (no user, query or spaces)"
        )));
    }
    let mut base = format!("{scheme}://{}", rest.trim_end_matches('/'));
    if let Some(stripped) = base.strip_suffix("/v1") {
        base = stripped.to_owned();
    }
    Ok(base)
}

fn invalid(message: String) -> RemoteError {
    RemoteError::InvalidSpec(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_name_url_and_key() {
        let spec: RemoteSpec = "lab=http://gpu-box:8000/v1/,sk-123".parse().unwrap();
        assert_eq!(spec.name, "lab");
        assert_eq!(spec.url, "http://gpu-box:8000");
        assert_eq!(spec.api_key.as_deref(), Some("sk-123"));
        let spec: RemoteSpec = "vllm.1=HTTP://10.0.0.2:8000/proxy".parse().unwrap();
        assert_eq!(spec.url, "http://10.0.0.2:8000/proxy");
        let spec: RemoteSpec = "cloud=https://api.example.com/v1".parse().unwrap();
        assert_eq!(spec.url, "https://api.example.com");
        assert_eq!(spec.api_key, None);
        // An empty key is no key.
        let spec: RemoteSpec = "x=http://h:1,".parse().unwrap();
        assert_eq!(spec.api_key, None);
    }

    #[test]
    fn refuses_what_is_not_an_engine_address() {
        for bad in [
            "http://h:1",
            "=http://h:1",
            "a b=http://h:1",
            "lab=gpu-box:8000",
            "lab=ftp://h",
            "lab=http://",
            "lab=http://user:pw@h:1",
            "lab=http://h:1/?x=1",
            "lab=http://h:1,two words",
            "local=http://h:1",
        ] {
            let err = bad.parse::<RemoteSpec>().unwrap_err();
            assert_eq!(err.code(), "invalid_remote", "{bad}");
        }
        let long = format!("{}=http://h:1", "n".repeat(65));
        assert!(long.parse::<RemoteSpec>().is_err());
    }

    #[test]
    fn debug_hides_the_key() {
        let spec: RemoteSpec = "lab=http://h:1,secret-key".parse().unwrap();
        assert!(!format!("{spec:?}").contains("secret-key"));
    }
}
