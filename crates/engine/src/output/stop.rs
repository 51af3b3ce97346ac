//! Stop strings: hold back text that might be the start of a stop string, cut at a match.

/// What the matcher lets out after new text arrives.
#[derive(Debug, PartialEq, Eq)]
pub enum StopScan {
    /// Text safe to show; no stop string seen.
    Continue(String),
    /// A stop string matched: the text before it, and which stop string it was.
    Stopped { text: String, stop: String },
}

#[derive(Debug)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released, because it could begin a stop string.
    held: String,
}

impl StopMatcher {
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> StopScan {
        if self.stops.is_empty() {
            return StopScan::Continue(text.to_owned());
        }
        self.held.push_str(text);
        // Earliest match wins, so that output never contains any stop string.
        let first_match = self
            .stops
            .iter()
            .filter_map(|stop| self.held.find(stop.as_str()).map(|at| (at, stop)))
            .min_by_key(|(at, _)| *at);
        if let Some((at, stop)) = first_match {
            let stop = stop.clone();
            let text = self.held[..at].to_owned();
            self.held.clear();
            return StopScan::Stopped { text, stop };
        }
        let keep = self.longest_partial_suffix();
        let release_to = self.held.len() - keep;
        let released = self.held[..release_to].to_owned();
        self.held.drain(..release_to);
        StopScan::Continue(released)
    }

    /// Text still held back when the run ends for another reason.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of `held` that is a proper prefix of a stop string.
    fn longest_partial_suffix(&self) -> usize {
        let mut best = 0;
        for stop in &self.stops {
            for (i, _) in self.held.char_indices() {
                let suffix = &self.held[i..];
                if suffix.len() < stop.len() && stop.starts_with(suffix) {
                    best = best.max(suffix.len());
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn no_stops_releases_everything() {
        let mut m = matcher(&[]);
        assert_eq!(m.push("abc"), StopScan::Continue("abc".into()));
    }

    #[test]
    fn stop_inside_one_piece_cuts_before_it() {
        let mut m = matcher(&["END"]);
        assert_eq!(
            m.push("hello END world"),
            StopScan::Stopped {
                text: "hello ".into(),
                stop: "END".into()
            }
        );
    }

    #[test]
    fn stop_split_across_pieces_is_held_then_cut() {
        let mut m = matcher(&["\n\n"]);
        assert_eq!(m.push("one\n"), StopScan::Continue("one".into()));
        assert_eq!(
            m.push("\ntwo"),
            StopScan::Stopped {
                text: "".into(),
                stop: "\n\n".into()
            }
        );
    }

    #[test]
    fn false_alarm_is_released_later() {
        let mut m = matcher(&["STOP"]);
        assert_eq!(m.push("ST"), StopScan::Continue("".into()));
        assert_eq!(m.push("ART"), StopScan::Continue("START".into()));
        assert_eq!(m.flush(), "");
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        let mut m = matcher(&["b", "a"]);
        assert_eq!(
            m.push("xxaxb"),
            StopScan::Stopped {
                text: "xx".into(),
                stop: "a".into()
            }
        );
    }

    #[test]
    fn flush_returns_held_partial_match() {
        let mut m = matcher(&["World"]);
        assert_eq!(m.push("Hello Wor"), StopScan::Continue("Hello ".into()));
        assert_eq!(m.flush(), "Wor");
    }

    #[test]
    fn multibyte_text_is_not_split() {
        let mut m = matcher(&["€x"]);
        assert_eq!(m.push("a€"), StopScan::Continue("a".into()));
        assert_eq!(m.push("y"), StopScan::Continue("€y".into()));
    }
}
