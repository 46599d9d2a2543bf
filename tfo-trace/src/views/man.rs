//! `tfo-trace man`: the manual pages, generated from the command line's own definition
//! (clap_mangen) so options never drift from `--help`, plus what clap cannot know: the
//! keys of `top`, exit status, files and examples. One page per visible subcommand
//! (`tfo-trace-trace(1)`, ...) and `tfo-trace(1)` listing them; `--dir` writes them all,
//! as the .deb and `cargo xtask dist` install them.
use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use clap::CommandFactory;
use clap_mangen::{
    roff::{bold, italic, roman, Roff},
    Man,
};

use crate::{cli::Cli, views::top::state::KEYS};

/// What a page says beyond its options.
struct Extra {
    /// The subcommand (`""`: the top-level page).
    command: &'static str,
    /// Files it reads or writes: (path, why).
    files: &'static [(&'static str, &'static str)],
    /// (command line, what it does).
    examples: &'static [(&'static str, &'static str)],
}

const BTF: (&str, &str) = (
    "/sys/kernel/btf/vmlinux",
    "The kernel's type information: struct layouts for the eBPF programs (--btf FILE instead).",
);
const NETSTAT: (&str, &str) = (
    "/proc/net/netstat, /run/netns",
    "The kernel's TFO counters and the named network namespaces (doctor and the closing line).",
);
const RECORDING: (&str, &str) = (
    "FILE of --record / --from",
    "A recording: a header line, then one JSON event per line; written mode 0600.",
);

const EXTRAS: &[Extra] = &[
    Extra {
        command: "",
        files: &[
            BTF,
            NETSTAT,
            ("/proc/sys/net/ipv4/tcp_fastopen", "TFO's mode per network namespace (doctor, top's header)."),
            (
                "/lib/systemd/system/tfo-trace-exporter.service",
                "The exporter as a service (installed by the package, not enabled).",
            ),
        ],
        examples: &[
            ("sudo tfo-trace top", "Live tables of TFO outcomes per destination, listener, process, container."),
            ("sudo tfo-trace stalls", "Only the connections that lost time to a SYN timeout, and why."),
            ("tfo-trace doctor", "What this kernel and host support, and advice."),
            ("sudo setcap cap_bpf,cap_perfmon+ep /usr/bin/tfo-trace", "Let users run it without root."),
        ],
    },
    Extra {
        command: "trace",
        files: &[BTF, RECORDING],
        examples: &[
            ("sudo tfo-trace trace", "One line per TFO connection outcome until Ctrl-C."),
            ("sudo tfo-trace trace --json --duration 30s", "JSON lines for 30 seconds."),
            ("sudo tfo-trace trace --daddr 10.0.0.0/8 --record /tmp/tfo.jsonl", "Only those destinations, recorded."),
            (
                "sudo tfo-trace trace --names",
                "Client destinations as name (address:port), the DNS name their process resolved; dname in JSON.",
            ),
        ],
    },
    Extra {
        command: "stalls",
        files: &[BTF, RECORDING],
        examples: &[
            ("sudo tfo-trace stalls", "Stalled connections as they happen, a summary by destination at exit."),
            ("sudo tfo-trace stalls --json --duration 5m", "JSON lines for five minutes."),
            ("sudo tfo-trace stalls --names", "Lines and summary name each destination: name (address:port)."),
        ],
    },
    Extra {
        command: "top",
        files: &[BTF, RECORDING],
        examples: &[
            ("sudo tfo-trace top", "The terminal UI (see KEYS)."),
            ("sudo tfo-trace top -b -n 3 -d 2", "Plain tables every 2 s, three times."),
            ("sudo tfo-trace top --json | jq .totals", "JSON snapshots, one per line."),
            ("tfo-trace top --from /tmp/tfo.jsonl --batch", "The tables of a recording."),
            ("sudo tfo-trace top --names", "A NAME column beside each destination (dname in JSON); / matches it too."),
        ],
    },
    Extra {
        command: "report",
        files: &[BTF, NETSTAT, RECORDING],
        examples: &[
            ("sudo tfo-trace report --duration 60s", "Trace a minute, then the verdicts."),
            ("tfo-trace report --from /tmp/tfo.jsonl --format markdown", "A recording's report for a ticket."),
            ("tfo-trace report --from hosts/ --group-by prefix", "Several hosts' recordings, by network."),
        ],
    },
    Extra {
        command: "doctor",
        files: &[
            BTF,
            NETSTAT,
            ("/proc/kallsyms", "Which kernel functions exist (and were not inlined) for the hooks."),
            ("/proc/sys/net/ipv4/tcp_fastopen*", "TFO's sysctls, per network namespace."),
        ],
        examples: &[
            ("tfo-trace doctor", "Kernel, hooks, backends, sysctls per namespace, advice."),
            ("tfo-trace doctor --json", "The same, for scripts."),
        ],
    },
    Extra {
        command: "export",
        files: &[
            BTF,
            ("PATH of --textfile", "Rewritten atomically every --interval for node_exporter."),
            ("/lib/systemd/system/tfo-trace-exporter.service", "The exporter as a service, not enabled."),
            (
                "FILE of --web.config.file",
                "TLS and basic auth, in the Prometheus exporter-toolkit's web-config format; read at start.",
            ),
        ],
        examples: &[
            ("sudo tfo-trace export", "Serve /metrics on 127.0.0.1:17413."),
            ("sudo systemctl enable --now tfo-trace-exporter", "The packaged service."),
            (
                "sudo tfo-trace export --names --top-destinations 50",
                "Per-destination series labelled with the name each was first seen with (dname).",
            ),
            (
                "sudo tfo-trace export --web.disable --textfile /var/lib/prometheus/node-exporter/tfo_trace.prom",
                "Only the textfile.",
            ),
            (
                "sudo tfo-trace export --web.listen-address 0.0.0.0:17413 --web.config.file /etc/tfo-trace/web.yml",
                "Beyond loopback, over TLS with basic auth (the file node_exporter reads).",
            ),
        ],
    },
    Extra {
        command: "completions",
        files: &[],
        examples: &[
            ("tfo-trace completions bash > /etc/bash_completion.d/tfo-trace", "bash"),
            ("tfo-trace completions zsh > /usr/local/share/zsh/site-functions/_tfo-trace", "zsh"),
            ("tfo-trace completions fish > ~/.config/fish/completions/tfo-trace.fish", "fish"),
        ],
    },
    Extra {
        command: "man",
        files: &[],
        examples: &[
            ("tfo-trace man top | man -l -", "Read one page without installing it."),
            ("sudo tfo-trace man --dir /usr/local/share/man/man1", "Install every page."),
        ],
    },
    Extra {
        command: "demo",
        files: &[BTF],
        examples: &[
            ("sudo tfo-trace demo", "The built-in lab for 20 s under top, then everything it made is removed."),
            ("sudo tfo-trace demo --duration 1m", "A minute of it."),
        ],
    },
];

const EXIT_STATUS: [(&str, &str); 3] = [
    ("0", "Success."),
    (
        "1",
        "Failure: missing privileges or kernel support, an unreadable file; one line on stderr says which.",
    ),
    ("2", "Usage: an unknown flag or a bad value."),
];

/// The command line as the pages describe it: the help subcommand is `--help` here.
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build(); // gives subcommands their display names (`tfo-trace-top`)
    cmd
}

/// The visible subcommands' names, in the order `--help` lists them.
pub fn subcommands() -> Vec<String> {
    Cli::visible_subcommands()
}

/// The page of `subcommand` (None: tfo-trace(1)) as roff.
pub fn page(subcommand: Option<&str>) -> Result<Vec<u8>> {
    let root = command();
    let cmd = match subcommand {
        None => root.clone(),
        Some(name) => match root.get_subcommands().find(|s| s.get_name() == name && !s.is_hide_set()) {
            Some(c) => c.clone(),
            None => bail!("no manual page for `{name}`; pages: {}", subcommands().join(", ")),
        },
    };
    let extra = EXTRAS.iter().find(|e| e.command == subcommand.unwrap_or(""));
    let man = Man::new(cmd.clone()).manual("tfo-trace manual");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if subcommand.is_none() {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = Roff::default();
    if subcommand == Some("top") {
        keys(&mut roff);
    }
    definitions(&mut roff, "EXIT STATUS", &EXIT_STATUS);
    if let Some(e) = extra {
        if !e.files.is_empty() {
            definitions(&mut roff, "FILES", e.files);
        }
        examples(&mut roff, e.examples);
    }
    see_also(&mut roff, subcommand);
    roff.control("SH", ["VERSION"]);
    for line in crate::build_info::LONG_VERSION.lines() {
        roff.text([roman(line)]).control("br", []);
    }
    roff.to_writer(&mut out)?;
    Ok(out)
}

/// `tfo-trace-top.1` (or `tfo-trace.1`).
pub fn file_name(subcommand: Option<&str>) -> String {
    match subcommand {
        None => "tfo-trace.1".to_string(),
        Some(s) => format!("tfo-trace-{s}.1"),
    }
}

/// Writes every page into `dir`; returns their paths.
pub fn write_all(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let names: Vec<Option<String>> =
        std::iter::once(None).chain(subcommands().into_iter().map(Some)).collect();
    let mut written = Vec::new();
    for name in &names {
        let path = dir.join(file_name(name.as_deref()));
        std::fs::write(&path, page(name.as_deref())?)
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// `tfo-trace man [COMMAND] [--dir DIR]`.
pub fn run(command: Option<&str>, dir: Option<&Path>) -> Result<()> {
    let text = match dir {
        Some(dir) => {
            write_all(dir)?.iter().map(|p| format!("{}\n", p.display())).collect::<String>().into_bytes()
        }
        None => page(command)?,
    };
    crate::live::output::stdout_written(std::io::stdout().lock().write_all(&text))
}

fn keys(roff: &mut Roff) {
    roff.control("SH", ["KEYS"]);
    roff.text([roman("On a terminal, without --batch or --json:")]);
    for (key, lines) in KEYS {
        roff.control("TP", []).text([bold(key)]).text([roman(lines.join(" "))]);
    }
}

fn definitions(roff: &mut Roff, heading: &str, items: &[(&str, &str)]) {
    roff.control("SH", [heading]);
    for (term, what) in items {
        roff.control("TP", []).text([bold(*term)]).text([roman(*what)]);
    }
}

fn examples(roff: &mut Roff, items: &[(&str, &str)]) {
    roff.control("SH", ["EXAMPLES"]);
    for (line, what) in items {
        roff.control("TP", []).text([bold(*line)]).text([roman(*what)]);
    }
}

fn see_also(roff: &mut Roff, subcommand: Option<&str>) {
    roff.control("SH", ["SEE ALSO"]);
    let mut refs: Vec<String> = match subcommand {
        None => subcommands().iter().map(|s| format!("tfo-trace-{s}(1)")).collect(),
        Some(_) => vec!["tfo-trace(1)".to_string()],
    };
    refs.extend(["nstat(8)", "ip-tcp_metrics(8)", "bpftool(8)"].map(String::from));
    let mut inlines = Vec::new();
    for (i, r) in refs.iter().enumerate() {
        if i > 0 {
            inlines.push(roman(", "));
        }
        inlines.push(italic(r.as_str()));
    }
    roff.text(inlines);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(page: Option<&str>) -> String {
        String::from_utf8(super::page(page).unwrap()).unwrap()
    }

    #[test]
    fn one_page_per_visible_subcommand_and_none_for_hidden_ones() {
        let names = subcommands();
        for want in ["trace", "stalls", "top", "report", "doctor", "export", "completions", "man", "demo"] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        for hidden in ["lab-server", "lab-client", "lab-load", "lab-soak", "floor", "help"] {
            assert!(!names.iter().any(|n| n == hidden), "{hidden} has no page");
            assert!(page(Some(hidden)).is_err());
        }
        for e in EXTRAS {
            assert!(e.command.is_empty() || names.iter().any(|n| n == e.command), "{} exists", e.command);
        }
        for n in &names {
            assert!(EXTRAS.iter().any(|e| e.command == n), "{n} has its files and examples");
        }
    }

    #[test]
    fn a_page_has_its_options_exit_status_files_and_examples() {
        // roff escapes every hyphen.
        let top = text(Some("top")).replace("\\-", "-");
        assert!(top.contains("\n.TH tfo-trace-top 1 "), "{top}");
        for section in ["NAME", "SYNOPSIS", "OPTIONS", "KEYS", "EXIT STATUS", "FILES", "EXAMPLES", "SEE ALSO"]
        {
            assert!(
                top.contains(&format!(".SH {section}")) || top.contains(&format!(".SH \"{section}\"")),
                "{section}"
            );
        }
        assert!(top.contains("--max-groups"), "options come from clap");
        for (key, _) in KEYS {
            assert!(top.contains(key), "key {key}");
        }
        let root = text(None).replace("\\-", "-");
        assert!(root.contains("tfo-trace-report(1)"), "{root}");
        assert!(!root.contains(".SH KEYS"));
    }
}
