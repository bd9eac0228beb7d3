//! The terminal: its size, and a status line on stderr redrawn in place.

use std::io::{IsTerminal, Write};

use crate::sys;

/// Columns and rows of the terminal on `fd`, if it is one.
pub fn size(fd: i32) -> Option<(usize, usize)> {
    sys::terminal_size(fd)
}

/// `text` cut to `width` characters.
pub fn fit(text: &str, width: usize) -> String {
    text.chars().take(width).collect()
}

/// One line on stderr, redrawn with `\r` and clear-to-end; drawn only on a
/// terminal.
pub struct StatusLine {
    enabled: bool,
    drawn: bool,
}

impl StatusLine {
    pub fn new(wanted: bool) -> StatusLine {
        StatusLine {
            enabled: wanted && std::io::stderr().is_terminal(),
            drawn: false,
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn draw(&mut self, text: &str) {
        if !self.enabled {
            return;
        }
        // One column short of the width: writing the last column wraps on
        // some terminals, and a wrapped line is not redrawn by `\r`.
        let width = size(2).map_or(80, |(cols, _)| cols.saturating_sub(1));
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{}\x1b[K", fit(text, width));
        let _ = err.flush();
        self.drawn = true;
    }

    pub fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits() {
        assert_eq!(fit("waiting for job", 7), "waiting");
        assert_eq!(fit("é€x", 2), "é€");
        assert_eq!(fit("ab", 10), "ab");
    }
}
