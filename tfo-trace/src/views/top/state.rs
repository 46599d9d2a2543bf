//! What the user chose in the terminal UI (table, sort, filter, pause, help) and how keys
//! change it. No terminal here, so every key is unit-tested.
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::rows::View;
use crate::cli::Sort;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UiState {
    pub view: View,
    pub sort: Sort,
    pub filter: String,
    /// `/` was pressed: keys go to the filter until Enter or Esc.
    pub editing: bool,
    pub paused: bool,
    pub help: bool,
}

/// What a key asks the loop to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    None,
    Redraw,
    Quit,
}

/// The footer: every key, in the order SREs look for them.
pub(crate) const KEYS_HELP: [(&str, &str); 8] = [
    ("q", "quit"),
    ("1-4", "table"),
    ("Tab", "next table"),
    ("Space", "pause"),
    ("s", "sort"),
    ("/", "filter"),
    ("?", "help"),
    ("Esc", "quit/close"),
];

/// Every key, with what it does, as the help overlay (`?`) and the man page (KEYS in
/// tfo-trace-top(1)) show it: one entry per key, its text in lines of the overlay's width.
pub(crate) const KEYS: [(&str, &[&str]); 6] = [
    ("q Esc Ctrl-C", &["quit"]),
    ("1 2 3 4 Tab", &["destinations listeners processes", "containers (tall: all at once)"]),
    ("Space", &["pause the display (counting goes on)"]),
    ("s", &["sort: attempts stalls stalls/s lost p99", "accepted name"]),
    ("/", &["filter: address port dest name netns", "pid comm container (a - row: the host)"]),
    ("?", &["this help (any key closes it)"]),
];

impl UiState {
    pub(crate) fn new(view: View, sort: Sort, filter: String) -> Self {
        UiState { view, sort, filter, editing: false, paused: false, help: false }
    }

    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && matches!(key.code, KeyCode::Char('c' | 'C')) {
            return Action::Quit;
        }
        if self.editing {
            match key.code {
                KeyCode::Enter => self.editing = false,
                KeyCode::Esc => {
                    self.editing = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                // Alt-x is ESC then x sent too fast (a terminal's ambiguity): not text.
                KeyCode::Char(c)
                    if !c.is_control()
                        && !key.modifiers.contains(KeyModifiers::ALT)
                        && self.filter.chars().count() < 64 =>
                {
                    self.filter.push(c)
                }
                _ => return Action::None,
            }
            return Action::Redraw;
        }
        if self.help {
            // Any key closes the help; q still quits.
            self.help = false;
            return if key.code == KeyCode::Char('q') { Action::Quit } else { Action::Redraw };
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Char(c @ '1'..='9') => match View::ALL.get(usize::from(c as u8 - b'1')) {
                Some(&v) => self.view = v,
                None => return Action::None,
            },
            KeyCode::Tab => self.view = self.view.next(),
            KeyCode::BackTab => {
                self.view = View::ALL[(self.view.key() + View::ALL.len() - 2) % View::ALL.len()]
            }
            KeyCode::Char(' ') => self.paused = !self.paused,
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('/') => self.editing = true,
            KeyCode::Char('?') | KeyCode::Char('h') => self.help = true,
            _ => return Action::None,
        }
        Action::Redraw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    fn state() -> UiState {
        UiState::new(View::Destinations, Sort::Attempts, String::new())
    }

    #[test]
    fn quit_keys() {
        for k in [
            key(KeyCode::Char('q')),
            key(KeyCode::Esc),
            KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL),
        ] {
            assert_eq!(state().on_key(k), Action::Quit, "{k:?}");
        }
        // Ctrl-C quits even while typing a filter.
        let mut s = state();
        s.on_key(key(KeyCode::Char('/')));
        assert_eq!(s.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), Action::Quit);
    }

    #[test]
    fn tables_sort_pause_help() {
        let mut s = state();
        s.on_key(key(KeyCode::Char('3')));
        assert_eq!(s.view, View::Processes);
        s.on_key(key(KeyCode::Tab));
        assert_eq!(s.view, View::Containers);
        s.on_key(key(KeyCode::Tab));
        assert_eq!(s.view, View::Destinations);
        s.on_key(key(KeyCode::BackTab));
        assert_eq!(s.view, View::Containers);
        s.on_key(key(KeyCode::Char('3')));
        s.on_key(key(KeyCode::Char('4')));
        assert_eq!(s.view, View::Containers);
        assert_eq!(s.on_key(key(KeyCode::Char('5'))), Action::None, "no fifth table");
        assert_eq!(s.view, View::Containers);
        s.on_key(key(KeyCode::Char('2')));
        assert_eq!(s.view, View::Listeners);
        s.on_key(key(KeyCode::Char('s')));
        assert_eq!(s.sort, Sort::Stalls);
        s.on_key(key(KeyCode::Char(' ')));
        assert!(s.paused);
        s.on_key(key(KeyCode::Char(' ')));
        assert!(!s.paused);
        s.on_key(key(KeyCode::Char('?')));
        assert!(s.help);
        assert_eq!(s.on_key(key(KeyCode::Esc)), Action::Redraw, "Esc closes the help first");
        assert!(!s.help);
        assert_eq!(s.on_key(key(KeyCode::Char('x'))), Action::None);
    }

    #[test]
    fn filter_editing() {
        let mut s = state();
        s.on_key(key(KeyCode::Char('/')));
        for c in "8080q".chars() {
            assert_eq!(s.on_key(key(KeyCode::Char(c))), Action::Redraw, "q is text while editing");
        }
        s.on_key(key(KeyCode::Backspace));
        assert_eq!(s.on_key(KeyEvent::new(KeyCode::Char('q'), KeyModifiers::ALT)), Action::None);
        s.on_key(key(KeyCode::Enter));
        assert_eq!(s.filter, "8080");
        assert!(!s.editing);
        s.on_key(key(KeyCode::Char('/')));
        s.on_key(key(KeyCode::Esc));
        assert_eq!(s.filter, "", "Esc while editing clears the filter");
        assert!(!s.editing);
    }
}
