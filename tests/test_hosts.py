"""`hosts:` entries: every spelling fio accepts, host-list files, and errors that say what was expected."""

from __future__ import annotations

import pytest

from gdsbench.hosts import DEFAULT_PORT, Host, HostError, HostKind, parse_host, parse_hosts


@pytest.mark.parametrize(
    ("text", "host", "label", "spec"),
    [
        ("node1", Host(HostKind.TCP, "node1", DEFAULT_PORT), "node1", "ip:node1,8765"),
        ("node1:8766", Host(HostKind.TCP, "node1", 8766), "node1:8766", "ip:node1,8766"),
        ("127.0.0.1,18765", Host(HostKind.TCP, "127.0.0.1", 18765), "127.0.0.1:18765", "ip:127.0.0.1,18765"),
        ("ip:10.0.0.2,9000", Host(HostKind.TCP, "10.0.0.2", 9000), "10.0.0.2:9000", "ip:10.0.0.2,9000"),
        ("[::1]:8767", Host(HostKind.TCP6, "::1", 8767), "[::1]:8767", "ip6:::1,8767"),
        ("[fe80::1]", Host(HostKind.TCP6, "fe80::1", DEFAULT_PORT), "[fe80::1]:8765", "ip6:fe80::1,8765"),
        ("ip6:::1,8768", Host(HostKind.TCP6, "::1", 8768), "[::1]:8768", "ip6:::1,8768"),
        ("sock:/run/fio.sock", Host(HostKind.SOCK, "/run/fio.sock"), "sock:/run/fio.sock", "sock:/run/fio.sock"),
    ],
)
def test_every_spelling_parses_to_one_host(text, host, label, spec):
    parsed = parse_host(text)
    assert parsed == host
    assert parsed.label == label
    assert parsed.spec == spec
    assert parse_host(parsed.spec) == parsed  # the fio spelling reads back as the same host


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node1:0", "a port number from 1 to 65535"),
        ("node1:99999", "a port number from 1 to 65535"),
        ("node1:http", "a port number from 1 to 65535"),
        ("::1", "an IPv6 address in brackets"),
        ("[::1", "[ipv6 address] or [ipv6 address]:port"),
        ("[nonsense]:1", "an IPv6 address such as ::1"),
        ("sock:", "sock: followed by a socket path"),
        ("sock:/" + "x" * 120, "a socket path of at most 107 bytes"),
        ("no spaces", "a host name or IPv4 address"),
        ("all", "a host other than 'all'"),
    ],
)
def test_bad_entries_say_what_was_expected(text, expected):
    with pytest.raises(ValueError, match="^" + expected.replace("[", r"\[").replace("]", r"\]")):
        parse_host(text)


def test_a_list_keeps_its_order_and_names_the_bad_entry():
    assert [h.label for h in parse_hosts(["b", "a:9000", "sock:/s"])] == ["b", "a:9000", "sock:/s"]
    with pytest.raises(HostError) as info:
        parse_hosts(["node1", "node2:0"])
    assert info.value.where == "hosts[1]"
    assert str(info.value) == "hosts[1]: expected a port number from 1 to 65535 (got 'node2:0')"


def test_a_host_listed_twice_is_refused():
    with pytest.raises(HostError, match=r"hosts\[1\]: expected each host once \(node1 is also hosts\[0\]\)"):
        parse_hosts(["node1", "node1:8765"])


@pytest.mark.parametrize("value", [None, [], 3, {"a": 1}, [""], [5]])
def test_not_a_list_of_hosts(value):
    with pytest.raises(HostError, match="expected"):
        parse_hosts(value)


def test_host_list_file_as_fio_reads_it_with_comments(tmp_path):
    listing = tmp_path / "hosts.list"
    listing.write_text("# the rack\nnode1 node2:9000  # two on a line\n\nip:10.0.0.3,8766\nsock:/run/a.sock\n")
    hosts = parse_hosts("hosts.list", base=tmp_path)
    assert [h.label for h in hosts] == ["node1", "node2:9000", "10.0.0.3:8766", "sock:/run/a.sock"]
    assert parse_hosts(["node0", str(listing)])[1:] == hosts  # a file among entries expands in place


def test_host_list_errors_name_file_and_line(tmp_path):
    listing = tmp_path / "hosts.list"
    listing.write_text("node1\n\nnode2:0\n")
    with pytest.raises(HostError) as info:
        parse_hosts([str(listing)])
    assert info.value.where == f"{listing}:3"
    with pytest.raises(HostError, match="a readable host-list file"):
        parse_hosts(["./missing.list"], base=tmp_path)
    (tmp_path / "empty.list").write_text("# nobody\n")
    with pytest.raises(HostError, match="at least one host"):
        parse_hosts("./empty.list", base=tmp_path)


def test_reports_as_matches_fios_hostname_and_port():
    tcp, sock = parse_host("127.0.0.1:18765"), parse_host("sock:/tmp/s.sock")
    assert tcp.reports_as("127.0.0.1", 18765)
    assert not tcp.reports_as("127.0.0.1", 18766)
    assert sock.reports_as("/tmp/s.sock", DEFAULT_PORT)  # fio gives sockets the default port
    assert not sock.reports_as("/tmp/other.sock", DEFAULT_PORT)


@pytest.mark.parametrize(
    ("text", "local"),
    [
        *[("sock:/s", True), ("127.0.0.1:1", True), ("127.0.0.2", True), ("[::1]", True), ("localhost", True)],
        *[("node1", False), ("10.0.0.1", False), ("[fe80::1]", False)],
    ],
)
def test_is_local_tells_whose_files_they_are(text, local):
    assert parse_host(text).is_local is local
