//! Progress bars for long jobs (indicatif, like `partita bench`'s): experiment sweeps,
//! simulator swarms, calibration. A bar is drawn only when stderr is a terminal; in a
//! pipe, a log file or CI the callers print their plain lines instead, so nothing that
//! reads the output sees escape codes.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// Whether bars are drawn here (stderr is a terminal).
pub fn enabled() -> bool {
    std::io::stderr().is_terminal()
}

/// A bar of `len` steps labelled `what`, or `None` when stderr is not a terminal.
pub fn bar(len: u64, what: &str) -> Option<ProgressBar> {
    if !enabled() {
        return None;
    }
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(
            "{prefix:>8} [{bar:40}] {pos}/{len} {elapsed_precise} (eta {eta}) {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    b.set_prefix(what.to_string());
    Some(b)
}

/// A spinner labelled `what` whose message says the current step, or `None` when
/// stderr is not a terminal.
pub fn spinner(what: &str) -> Option<ProgressBar> {
    if !enabled() {
        return None;
    }
    let b = ProgressBar::new_spinner();
    b.set_style(
        ProgressStyle::with_template("{prefix} {spinner} {elapsed_precise} {msg}")
            .expect("a valid template"),
    );
    b.set_prefix(what.to_string());
    b.enable_steady_tick(Duration::from_millis(200));
    Some(b)
}

/// Print a line to stderr, above the bar when there is one.
pub fn line(bar: Option<&ProgressBar>, text: &str) {
    match bar {
        Some(b) => b.println(text),
        None => eprintln!("{text}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_bar_without_a_terminal() {
        // Tests run with stderr captured or piped: never a bar there.
        if !super::enabled() {
            assert!(super::bar(10, "x").is_none());
            assert!(super::spinner("x").is_none());
            super::line(None, "a plain line");
        }
    }
}
