"""What a service job may name and choose, without the service: documents fetched by URL (real HTTP servers on
loopback addresses, one of them allowed), page ranges, documents that are neither PDFs nor images."""

from __future__ import annotations

import http.server
import re
import threading

import pytest

from conftest import write_pdf
from olmocr.serve.fetch import Fetcher, reachable
from olmocr.serve.documents import Refused, document_pages, page_range

PDF = b"%PDF-1.4 a document"


class Files(http.server.BaseHTTPRequestHandler):
    """``/doc.pdf``: the document; ``/to?<url>``: a redirect there; ``/chunked``: the document without a length."""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path.startswith("/to?"):
            self.send_response(302)
            self.send_header("Location", self.path[4:])
            self.end_headers()
        elif self.path == "/doc.pdf":
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.server.body)))
            self.end_headers()
            self.wfile.write(self.server.body)
        elif self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(self.server.body), 1000):
                chunk = self.server.body[start:start + 1000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve_files():
    servers = []

    def start(host: str, body: bytes = PDF) -> str:
        server = http.server.ThreadingHTTPServer((host, 0), Files)
        server.body = body
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://{host}:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_only_public_addresses_and_allowed_networks_are_reachable():
    import ipaddress

    for address in ("127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.5.4", "169.254.169.254", "100.64.0.1", "0.0.0.0",
                    "::1", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "224.0.0.1"):
        assert not reachable(address), address
    assert reachable("93.184.215.14") and reachable("2606:4700::1111")
    assert reachable("10.1.2.3", (ipaddress.ip_network("10.1.0.0/16"),))
    assert not reachable("10.2.0.1", (ipaddress.ip_network("10.1.0.0/16"),))


def test_a_url_is_fetched_only_where_allowed_also_after_a_redirect(serve_files):
    allowed = serve_files("127.0.0.2")  # the allowed network's server
    barred = serve_files("127.0.0.1")  # loopback, not allowed
    fetcher = Fetcher(allow_networks=("127.0.0.2/32",))
    assert fetcher.fetch(f"{allowed}/doc.pdf", 1000) == (PDF, "doc.pdf")
    assert fetcher.fetch(f"{allowed}/to?/doc.pdf", 1000) == (PDF, "doc.pdf")  # a redirect within the network
    with pytest.raises(Refused, match="127.0.0.1, a loopback, private or link-local address") as refused:
        fetcher.fetch(f"{barred}/doc.pdf", 1000)
    assert refused.value.status == 422
    # Where a redirect leads is checked as the first address was: the allowed server points at the barred one.
    with pytest.raises(Refused, match="127.0.0.1, a loopback"):
        fetcher.fetch(f"{allowed}/to?{barred}/doc.pdf", 1000)
    with pytest.raises(Refused, match="localhost is at 127.0.0.1"):
        fetcher.fetch(f"{allowed}/to?http://localhost:{barred.rsplit(':', 1)[1]}/doc.pdf", 1000)
    with pytest.raises(Refused, match=r"redirected to file:///etc/passwd, not http\(s\)"):
        fetcher.fetch(f"{allowed}/to?file:///etc/passwd", 1000)
    with pytest.raises(Refused, match="more than 2 redirects"):
        Fetcher(allow_networks=("127.0.0.2/32",), max_redirects=2).fetch(
            f"{allowed}/to?/to?/to?/doc.pdf", 1000)
    with pytest.raises(Refused, match="file scheme"):
        fetcher.fetch("file:///etc/passwd", 1000)
    with pytest.raises(Refused, match="answered HTTP 404"):
        fetcher.fetch(f"{allowed}/nothing", 1000)


def test_a_fetched_document_over_the_limit_is_refused_as_it_arrives(serve_files):
    host = serve_files("127.0.0.2", PDF + b"0" * 5000)
    fetcher = Fetcher(allow_networks=("127.0.0.0/8",))
    with pytest.raises(Refused, match="is 5019 bytes; this service takes at most 4000") as refused:
        fetcher.fetch(f"{host}/doc.pdf", 4000)  # said by its length
    assert refused.value.status == 413
    with pytest.raises(Refused, match="over 4000 bytes"):
        fetcher.fetch(f"{host}/chunked", 4000)  # no length: counted
    assert fetcher.fetch(f"{host}/chunked", 6000)[0] == PDF + b"0" * 5000


def test_s3_urls_only_under_the_configured_prefixes():
    with pytest.raises(Refused, match="not under an s3:// prefix this service reads from: none"):
        Fetcher().fetch("s3://bucket/in/doc.pdf", 1000)
    fetcher = Fetcher(s3_prefixes=("s3://bucket/in",))
    for url in ("s3://bucket/inside/doc.pdf", "s3://bucket/in/../secret/doc.pdf", "s3://other/in/doc.pdf"):
        with pytest.raises(Refused, match="not under an s3:// prefix"):
            fetcher.fetch(url, 1000)


def test_page_ranges_name_pages_in_order_each_once():
    assert page_range(None, 5) is None and page_range(" ", 5) is None
    assert page_range("1-3,7", 9) == [1, 2, 3, 7]
    assert page_range("4-, 2", 6) == [4, 5, 6, 2]
    assert page_range("2,2,1-2", 3) == [2, 1]
    for spec, why in (("0", "outside"), ("3-2", "outside"), ("1-9", "outside the document's pages 1-5"),
                      ("a", "not a page"), ("1-x", "not a page"), ("1,,2", "not a page")):
        with pytest.raises(Refused, match=why):
            page_range(spec, 5)


def test_a_document_is_counted_from_its_page_tree_and_its_range(tmp_path):
    three = open(write_pdf(str(tmp_path / "three.pdf"), ["one", "two", "three"]), "rb").read()
    assert document_pages(three, 3, None) == ("pdf", 3, None)
    assert document_pages(three, 2, "3,1") == ("pdf", 3, [3, 1])  # two pages converted: within max_pages=2
    with pytest.raises(Refused, match="3 pages to convert; this service takes at most 2") as refused:
        document_pages(three, 2, None)
    assert refused.value.status == 413
    with pytest.raises(Refused, match="neither a PDF nor an image"):
        document_pages(b"GIF? no, text", 5, None)
    with pytest.raises(Refused, match="cannot be converted: unreadable_pdf"):
        document_pages(b"%PDF-1.4 and nothing else", 5, None)


def tar(files: dict[str, bytes], gz: bool = True, sizes: dict[str, int] | None = None) -> bytes:
    """A tar archive of ``files``; ``sizes`` declares other sizes in the headers than the members have."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if gz else "w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    data = out.getvalue()
    for name, size in (sizes or {}).items():  # a header that claims more than it holds (a bomb's promise)
        raw = bytearray(data)
        at = raw.index(name.encode()) + 124
        raw[at:at + 12] = b"%011o\0" % size
        raw[at - 124 + 148:at - 124 + 156] = b" " * 8
        raw[at - 124 + 148:at - 124 + 156] = b"%06o\0 " % sum(raw[at - 124:at - 124 + 512])
        data = bytes(raw)
    return data


def test_an_archive_is_its_documents_within_bounds(tmp_path):
    from olmocr.serve.documents import archive_documents, is_archive

    one = open(write_pdf(str(tmp_path / "one.pdf"), ["one"]), "rb").read()
    three = open(write_pdf(str(tmp_path / "three.pdf"), ["a", "b", "c"]), "rb").read()
    archive = tar({"a/one.pdf": one, "notes.txt": b"not a document", "../three.pdf": three})
    assert is_archive(archive) and is_archive(tar({"x.pdf": one}, gz=False)) and not is_archive(one)
    assert archive_documents(archive, 10, 10**6, 10, 10**6) == (
        ["a/one.pdf", "../three.pdf"], 4, [{"name": "notes.txt", "reason": "not a PDF or an image"}])
    for limits, why in (((2, 10**6, 10, 10**6), "more than 2 entries (max_archive_members)"),
                        ((10, 1000, 10, 10**6), "unpacks to more than 1000 bytes (max_unpacked_mb)"),
                        ((10, 10**6, 3, 10**6), "more than 3 pages (max_pages)"),
                        ((10, 10**6, 10, 2000), f"archive member ../three.pdf is {len(three)} bytes; a document is "
                                                "at most 2000 (max_upload_mb)")):
        with pytest.raises(Refused, match=re.escape(why)) as refused:
            archive_documents(archive, *limits)
        assert refused.value.status == 413
    # Sizes are counted as the headers declare them, before a byte is unpacked.
    bomb = tar({"small.pdf": one, "huge.bin": b"x"}, gz=False, sizes={"huge.bin": 8**11 - 1})
    with pytest.raises(Refused, match="unpacks to more than"):
        archive_documents(bomb, 10, 10**9, 10, 10**9)
    with pytest.raises(Refused, match="holds no PDF or image"):
        archive_documents(tar({"notes.txt": b"text"}), 10, 10**6, 10, 10**6)
    with pytest.raises(Refused, match="archive member bad.pdf: the upload cannot be converted: unreadable_pdf"):
        archive_documents(tar({"bad.pdf": b"%PDF-1.4 nothing"}), 10, 10**6, 10, 10**6)
    with pytest.raises(Refused, match="the archive cannot be read") as refused:
        archive_documents(archive[: len(archive) // 2], 10, 10**6, 10, 10**6)
    assert refused.value.status == 422


def test_an_archive_is_checked_in_bounded_memory_and_lists_what_it_does_not_convert(tmp_path):
    """200,000 folders in under a megabyte, and a member of 1 GiB in about one: each refused after reading what a
    limit needs (the headers up to max_archive_members; a member's header), the memory a check takes a few
    megabytes whatever the archive lists. A name twice is refused; links, devices and FIFOs are listed, not
    converted."""
    import tracemalloc

    from support import hostile

    from olmocr.serve.documents import archive_documents

    one = open(write_pdf(str(tmp_path / "one.pdf"), ["one"]), "rb").read()
    for archive, limits, why in ((hostile.folder_bomb_tgz(), (1000, 2**31, 100, 2**21), "more than 1000 entries"),
                                 (hostile.zeros_member_tgz(), (1000, 2**31, 100, 2**21), "is 1073741824 bytes")):
        assert len(archive) < 2**21
        tracemalloc.start()
        with pytest.raises(Refused, match=why) as refused:
            archive_documents(archive, *limits)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert refused.value.status == 413 and peak < 8 * 2**20, peak
    with pytest.raises(Refused, match="names 'a.pdf' twice") as refused:
        archive_documents(hostile.tar_of([("a.pdf", one), ("b.pdf", one), ("a.pdf", one)]), 10, 10**6, 10, 10**6)
    assert refused.value.status == 422
    assert archive_documents(hostile.links_and_devices_tar(one), 10, 10**6, 10, 10**6) == (["doc.pdf"], 1, [
        {"name": "to-passwd", "reason": "not a regular file (a symbolic link)"},
        {"name": "hard", "reason": "not a regular file (a hard link)"},
        {"name": "pipe", "reason": "not a regular file (a FIFO)"},
        {"name": "null", "reason": "not a regular file (a character device)"}])


def test_outputs_a_workspace_cannot_hold_are_found_before_anything_is_stored():
    from olmocr.serve.documents import unstorable

    assert unstorable({"a.pdf": "markdown/ws/u.tar/a.md", "b/c.pdf": "markdown/ws/u.tar/b/c.md"}) is None
    assert "name is too long" in unstorable({"x" * 253: f"markdown/u.tar/{'x' * 253}.md"})
    assert "name is too long" in unstorable({"deep": "markdown/" + "d/" * 600 + "x.md"})
    assert "would write the same output" in unstorable({"a.pdf": "markdown/u/a.md", "a": "markdown/u/a.md"})
    assert "is where the second one's folder goes" in unstorable({"x": "markdown/u/x.md",
                                                                  "x.md/y.png": "markdown/u/x.md/y.png.md"})


def test_pages_of_no_size_beyond_pdfs_limits_or_nested_too_deeply_are_bad_documents():
    from support import hostile

    for data, why in ((hostile.zero_pdf(), "bad_page_size: the upload: page 1 is 0 x 0 pt"),
                      (hostile.sliver_pdf(), "page 1 is 200000 x 1 pt"),
                      (hostile.page_pdf("0 0 99999 792"), "page 1 is 99999 x 792 pt"),
                      (hostile.deep_tree_pdf(), "unreadable_pdf: the upload: Maximum page tree depth")):
        with pytest.raises(Refused, match=re.escape(why)) as refused:
            document_pages(data, 10, None)
        assert refused.value.status == 422
    assert document_pages(hostile.sliver_pdf(14000, 10), 10, None) == ("pdf", 1, None)  # a sliver, but a page


def test_a_sliver_page_is_not_rendered_for_the_model():
    """A page more than render.max_aspect times as long as it is wide never reaches a model server (whose vision
    processor refuses it): Reject, so the pipeline falls back to its text layer, as for a page that cannot render."""
    from support import hostile

    from olmocr.data.steps import Reject, RenderPage

    render = RenderPage(longest_side=200)
    with pytest.raises(Reject, match=r"sliver_page: .* page 1 is 14000 x 10: more than 200 times"):
        render({"pdf_path": "sliver.pdf", "page": 1, "pdf_bytes": hostile.sliver_pdf(14000, 10),
                "page_size": (14000.0, 10.0)})
    image = RenderPage(longest_side=200, max_aspect=2000)(
        {"pdf_path": "sliver.pdf", "page": 1, "pdf_bytes": hostile.sliver_pdf(14000, 10), "page_size": (14000.0, 10.0)})
    assert image["image"].size[0] == 200 * 14000 // 14000 and image["image"].size[1] <= 2
    with pytest.raises(Reject, match="sliver_page"):  # told by the image when the page's size is not known
        RenderPage(longest_side=400)({"pdf_path": "tall.pdf", "page": 1, "pdf_bytes": hostile.sliver_pdf(10, 14000)})


def test_addresses_embedding_ipv4_are_judged_by_the_ipv4_they_lead_to():
    import ipaddress

    for address in ("64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b:1::a9fe:a9fe", "2002:a00:1::", "2002:7f00:1::1",
                    "::127.0.0.1", "::a00:1", "::ffff:0:a9fe:a9fe", "fec0::1", "2001:0:4136:e378:8000:63bf:f5ff:fffe"):
        assert not reachable(address), address
    for address in ("64:ff9b::5db8:d70e", "2002:5db8:d70e::", "::ffff:93.184.215.14"):
        assert reachable(address), address
    assert reachable("64:ff9b::a00:1", (ipaddress.ip_network("10.0.0.0/8"),))  # its IPv4 is in an allowed network


def test_a_url_is_checked_as_a_url_and_fetched_in_its_ascii_form():
    from olmocr.serve.fetch import checked_url

    assert checked_url("https://exämple.org/pa th/ü?q=ä") == "https://xn--exmple-cua.org/pa%20th/%C3%BC?q=%C3%A4"
    assert checked_url("http://user:secret@host.org:8080/a%20b") == "http://host.org:8080/a%20b"  # no credentials
    for url, why in (("http://[::1", "is not a URL"), ("http://a:99999/", "is not a URL"), ("http:///x", "names no host"),
                     ("ftp://x/y", "ftp scheme"), ("gopher:x", "gopher scheme")):
        with pytest.raises(Refused, match=re.escape(why)) as refused:
            checked_url(url)
        assert refused.value.status == 422
    with pytest.raises(Refused, match=r"redirected to s3://b/k, not http\(s\)://"):
        checked_url("s3://b/k", redirected=True)
