#!/usr/bin/env bash
# install.sh install|uninstall: what `make install` and `make uninstall` run
# (see deploy/README.md). Run it from the repository's root.
#
# install builds sessiond and sessionctl with the commit stamped
# (-buildvcs=true: `sessiond --version`), installs them into $BINDIR, and
# the service definition for this system: on Linux the systemd user units
# into $SYSTEMD_USER_DIR, with ExecStart= naming the installed binary, then
# enables sessiond.socket when a user manager runs and reads that folder
# (else it prints what to run); on macOS the LaunchAgent into $LAUNCHD_DIR,
# bootstrapped when that is the folder launchd reads.
#
# uninstall stops and disables the service, then removes exactly the files
# install writes: the two binaries, the units (and the links `systemctl
# --user enable` made to them) or the plist. It never touches transcripts
# (~/.claude), the state folder (~/.local/state/sessiond), drop-ins made
# with `systemctl --user edit`, ~/.config/sessiond or the macOS log file.
#
# Variables (the Makefile passes its own, same defaults):
#   GO                go command (go)
#   PREFIX            ~/.local; BINDIR is $PREFIX/bin
#   SYSTEMD_USER_DIR  ${XDG_CONFIG_HOME:-~/.config}/systemd/user
#   LAUNCHD_DIR       ~/Library/LaunchAgents
#   SERVICE_OS        uname -s (Linux, Darwin), to pick the service kind
set -euo pipefail

action=${1:-}
cd "$(dirname "$0")/.."
: "${HOME:?HOME is not set}"
GO=${GO:-go}
PREFIX=${PREFIX:-$HOME/.local}
BINDIR=${BINDIR:-$PREFIX/bin}
default_unit_dir=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
SYSTEMD_USER_DIR=${SYSTEMD_USER_DIR:-$default_unit_dir}
default_launchd_dir=$HOME/Library/LaunchAgents
LAUNCHD_DIR=${LAUNCHD_DIR:-$default_launchd_dir}
SERVICE_OS=${SERVICE_OS:-$(uname -s)}

bins=(sessiond sessionctl)
units=(sessiond.socket sessiond.service)
label=dev.sessiond.sessiond
plist=$label.plist

say() { printf '%s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

# Paths go into sed replacements, unit files (where % is a specifier and
# blanks split words) and a plist (XML): keep to characters that need no
# quoting in any of them.
plain_path() {
	case $2 in
	/*) ;;
	*) die "$1 ($2) must be an absolute path" ;;
	esac
	case $2 in
	*[!A-Za-z0-9._/+@,=-]*) die "$1 ($2) holds a character the service files would need quoted; use a path of letters, digits and ._/+@,=-" ;;
	esac
}

# user_manager: a systemd user manager runs and answers.
user_manager() { command -v systemctl >/dev/null && systemctl --user show-environment >/dev/null 2>&1; }

# same_dir: both name the same folder (compared as written when one does
# not exist yet).
same_dir() {
	local a b
	a=$(cd -P -- "$1" 2>/dev/null && pwd) || a=$1
	b=$(cd -P -- "$2" 2>/dev/null && pwd) || b=$2
	[ "$a" = "$b" ]
}

tmp=
trap 'rm -rf "${tmp:-}"' EXIT

install_bins() {
	plain_path BINDIR "$BINDIR"
	tmp=$(mktemp -d)
	# Go stamps the commit only where .git is a folder; in a linked
	# worktree (.git is a file) it stamps nothing (golang/go#58218).
	local gitdir common
	gitdir=$(git rev-parse --path-format=absolute --git-dir 2>/dev/null || true)
	common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
	if [ -z "$gitdir" ]; then
		say "warning: not a git checkout: the binaries cannot carry a commit (sessiond --version says dev)"
	elif [ "$gitdir" != "$common" ]; then
		say "warning: this is a linked git worktree, where Go cannot stamp the commit (golang/go#58218): sessiond --version says dev; install from a clone to have it stamped"
	fi
	say "building sessiond and sessionctl (-buildvcs=true)"
	"$GO" build -buildvcs=true -o "$tmp/" ./cmd/sessiond ./cmd/sessionctl
	mkdir -p -- "$BINDIR"
	# install(1) replaces each file (unlink, then create), so a running
	# sessiond keeps its old binary until it restarts.
	for b in "${bins[@]}"; do
		install -m 755 "$tmp/$b" "$BINDIR/$b"
		say "installed $BINDIR/$b"
	done
	rm -rf "$tmp"
	tmp=
	say "version: $("$BINDIR/sessiond" --version)"
	case ":$PATH:" in
	*":$BINDIR:"*) ;;
	*) say "note: $BINDIR is not on your PATH; add it in your shell profile: export PATH=\"$BINDIR:\$PATH\"" ;;
	esac
}

remove_bins() {
	for b in "${bins[@]}"; do
		if [ -e "$BINDIR/$b" ] || [ -L "$BINDIR/$b" ]; then
			rm -f -- "$BINDIR/$b"
			say "removed $BINDIR/$b"
		fi
	done
}

systemd_install() {
	plain_path SYSTEMD_USER_DIR "$SYSTEMD_USER_DIR"
	mkdir -p -- "$SYSTEMD_USER_DIR"
	install -m 644 deploy/systemd/sessiond.socket "$SYSTEMD_USER_DIR/sessiond.socket"
	# The shipped unit runs %h/.local/bin/sessiond; the installed one runs
	# the binary just installed (plain_path refused '%', a specifier).
	local exec=$BINDIR/sessiond
	tmp=$(mktemp)
	sed -e "s|^ExecStart=%h/\.local/bin/sessiond |ExecStart=$exec |" deploy/systemd/sessiond.service >"$tmp"
	if [ "$(grep -c "^ExecStart=$exec " "$tmp")" != 1 ]; then
		rm -f "$tmp"
		die "deploy/systemd/sessiond.service has no 'ExecStart=%h/.local/bin/sessiond ' line to point at $BINDIR/sessiond"
	fi
	install -m 644 "$tmp" "$SYSTEMD_USER_DIR/sessiond.service"
	rm -f "$tmp"
	say "installed $SYSTEMD_USER_DIR/sessiond.socket and sessiond.service (ExecStart=$exec)"

	if same_dir "$SYSTEMD_USER_DIR" "$default_unit_dir" && user_manager; then
		systemctl --user daemon-reload
		systemctl --user enable --now sessiond.socket
		# An upgrade: a sessiond already running restarts on the new binary.
		systemctl --user try-restart sessiond.service
		say "enabled and started sessiond.socket: sessiond starts on the first connection (systemctl --user status sessiond.socket sessiond.service)"
	else
		if same_dir "$SYSTEMD_USER_DIR" "$default_unit_dir"; then
			say "no systemd user manager answers (systemctl --user): the units are installed but not enabled."
		else
			say "$SYSTEMD_USER_DIR is not the folder your user manager reads ($default_unit_dir): the units are installed but not enabled."
		fi
		say "Once a user manager runs (log in to a session with systemd), enable them with:"
		say "  systemctl --user daemon-reload"
		say "  systemctl --user enable --now sessiond.socket"
	fi
}

systemd_uninstall() {
	local present=()
	for u in "${units[@]}"; do
		[ -e "$SYSTEMD_USER_DIR/$u" ] && present+=("$u")
	done
	local managed=
	if same_dir "$SYSTEMD_USER_DIR" "$default_unit_dir" && user_manager; then
		managed=1
		if [ ${#present[@]} -gt 0 ]; then
			# Stops sessiond (it drains: up to TimeoutStopSec) and removes
			# the links enable made.
			systemctl --user disable --now "${present[@]}" || true
		fi
	elif [ ${#present[@]} -gt 0 ]; then
		say "no user manager to stop the units in $SYSTEMD_USER_DIR (none answers, or it does not read that folder): if sessiond runs from them, stop it yourself"
	fi
	# Links an enable made (here or by hand) to these very units, which
	# disable removes when a manager runs, and nothing else does otherwise.
	local link
	for u in "${units[@]}"; do
		for link in "$SYSTEMD_USER_DIR"/*.wants/"$u"; do
			if [ -L "$link" ] && [ "$(readlink -f -- "$link")" = "$(readlink -f -- "$SYSTEMD_USER_DIR/$u")" ]; then
				rm -f -- "$link"
				say "removed $link"
			fi
		done
	done
	for u in "${present[@]}"; do
		rm -f -- "$SYSTEMD_USER_DIR/$u"
		say "removed $SYSTEMD_USER_DIR/$u"
	done
	if [ -n "$managed" ]; then
		systemctl --user daemon-reload || true
	fi
	if [ -d "$SYSTEMD_USER_DIR/sessiond.service.d" ] || [ -d "$SYSTEMD_USER_DIR/sessiond.socket.d" ]; then
		say "kept your drop-ins ($SYSTEMD_USER_DIR/sessiond.*.d); remove them if you no longer want them"
	fi
}

launchd_domain() { printf 'gui/%s' "$(id -u)"; }

launchd_install() {
	plain_path LAUNCHD_DIR "$LAUNCHD_DIR"
	plain_path HOME "$HOME"
	mkdir -p -- "$LAUNCHD_DIR" "$HOME/Library/Logs"
	# The plist's two placeholders (see its header): the binary and the
	# home folder, replaced in its <string> values only.
	tmp=$(mktemp)
	sed -e "s|<string>/usr/local/bin/sessiond</string>|<string>$BINDIR/sessiond</string>|" \
		-e "s|<string>/Users/YOURNAME/|<string>$HOME/|g" "deploy/launchd/$plist" >"$tmp"
	if grep -q -e '<string>/usr/local/bin/sessiond</string>' -e '<string>/Users/YOURNAME/' "$tmp" ||
		! grep -q "<string>$BINDIR/sessiond</string>" "$tmp"; then
		rm -f "$tmp"
		die "deploy/launchd/$plist: placeholders not replaced as expected"
	fi
	if command -v plutil >/dev/null && ! plutil -lint "$tmp" >/dev/null; then
		plutil -lint "$tmp" || true
		rm -f "$tmp"
		die "the plist does not pass plutil -lint"
	fi
	if same_dir "$LAUNCHD_DIR" "$default_launchd_dir" && command -v launchctl >/dev/null; then
		# Replace a loaded agent: bootout stops it (SIGTERM, drain), and
		# bootstrap fails while launchd still unloads it, so it is retried.
		launchctl bootout "$(launchd_domain)/$label" 2>/dev/null || true
		install -m 644 "$tmp" "$LAUNCHD_DIR/$plist"
		rm -f "$tmp"
		say "installed $LAUNCHD_DIR/$plist"
		local i
		for i in 1 2 3 4 5 6 7 8 9 10; do
			if launchctl bootstrap "$(launchd_domain)" "$LAUNCHD_DIR/$plist" 2>/dev/null; then
				say "loaded $label: it runs now and at every login (launchctl print $(launchd_domain)/$label)"
				return
			fi
			sleep 1
		done
		die "launchctl bootstrap $(launchd_domain) $LAUNCHD_DIR/$plist failed; run it yourself to see why"
	fi
	install -m 644 "$tmp" "$LAUNCHD_DIR/$plist"
	rm -f "$tmp"
	if same_dir "$LAUNCHD_DIR" "$default_launchd_dir"; then
		say "installed $LAUNCHD_DIR/$plist, not loaded (no launchctl here); load it with:"
	else
		say "installed $LAUNCHD_DIR/$plist, not loaded (not the folder launchd reads, $default_launchd_dir); load it with:"
	fi
	say "  launchctl bootstrap $(launchd_domain) $LAUNCHD_DIR/$plist"
}

launchd_uninstall() {
	if same_dir "$LAUNCHD_DIR" "$default_launchd_dir" && command -v launchctl >/dev/null; then
		launchctl bootout "$(launchd_domain)/$label" 2>/dev/null || true
	fi
	if [ -e "$LAUNCHD_DIR/$plist" ]; then
		rm -f -- "$LAUNCHD_DIR/$plist"
		say "removed $LAUNCHD_DIR/$plist"
	fi
	say "kept the log file ($HOME/Library/Logs/sessiond.log), if any"
}

case $action in
install)
	install_bins
	case $SERVICE_OS in
	Linux) systemd_install ;;
	Darwin) launchd_install ;;
	*) say "no service definition for $SERVICE_OS: start $BINDIR/sessiond yourself" ;;
	esac
	;;
uninstall)
	case $SERVICE_OS in
	Linux) systemd_uninstall ;;
	Darwin) launchd_uninstall ;;
	esac
	remove_bins
	say "your transcripts and sessiond's state folder are untouched"
	;;
*) die "usage: deploy/install.sh install|uninstall" ;;
esac
