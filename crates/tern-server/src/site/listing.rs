//! Directory listings: a directory's entries as a small HTML page, or as
//! JSON for a client that asks for it (`Accept: application/json`).
//!
//! The entries are read from the open directory itself (the descriptor
//! `resolve::Root` opened beneath the root), and each is looked at with
//! `fstatat` relative to it, without following a symbolic link: a link is
//! listed as one, with its own size and time. Names starting with `.` are
//! never listed (the hidden rule), nor are devices, sockets and FIFOs,
//! which are never served either.
//!
//! A name may hold any byte but `/` and NUL; in the page it is HTML-escaped
//! as text and percent-encoded (everything but `A-Z a-z 0-9 - . _ ~`) as a
//! link relative to the directory, so no name can leave the table or
//! become a scheme (`a:b`), a query or a fragment.

use std::borrow::Cow;
use std::io;
use std::os::fd::OwnedFd;

use percent_encoding::{percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rustix::fs::{statat, AtFlags, Dir, FileType};
use serde::Serialize;
use tern_http::date::format_rfc3339;
use tern_http::qlist;

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    File,
    Directory,
    Symlink,
}

/// One listed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The name's bytes, as the file system holds them.
    pub name: Vec<u8>,
    pub kind: Kind,
    pub size: u64,
    /// Last modification, in whole seconds since the epoch.
    pub modified: u64,
}

/// The entries of the directory open as `dir` (which is consumed: reading
/// moves its offset), directories first, then by name in byte order.
pub fn read(dir: impl Into<OwnedFd>) -> io::Result<Vec<Entry>> {
    let mut dir = Dir::new(dir.into())?;
    let mut entries = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name();
        // `.`, `..` and hidden names.
        if name.to_bytes().starts_with(b".") {
            continue;
        }
        let stat = match statat(dir.fd()?, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            // Removed since the directory was read.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(err) => return Err(err.into()),
        };
        let kind = match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Directory,
            FileType::Symlink => Kind::Symlink,
            _ => continue,
        };
        entries.push(Entry {
            name: name.to_bytes().to_vec(),
            kind,
            size: u64::try_from(stat.st_size).unwrap_or(0),
            modified: u64::try_from(stat.st_mtime).unwrap_or(0),
        });
    }
    entries.sort_by(|a, b| (a.kind != Kind::Directory).cmp(&(b.kind != Kind::Directory)).then(a.name.cmp(&b.name)));
    Ok(entries)
}

/// Bytes kept as they are in a link: RFC 3986's unreserved characters.
const HREF: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The HTML page listing `entries` of the directory at `url_path` (decoded,
/// `/`-rooted, ending in `/`; shown in the title, HTML-escaped). Links are
/// relative to that directory.
pub fn html(url_path: &[u8], entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(600 + entries.len() * 150);
    out.extend_from_slice(b"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Index of ");
    escape_html(&mut out, url_path);
    out.extend_from_slice(
        b"</title>\n<style>body{font-family:sans-serif}th,td{padding:0 1.5em 0 0;text-align:left}\
          td.size{text-align:right}</style>\n</head>\n<body>\n<h1>Index of ",
    );
    escape_html(&mut out, url_path);
    out.extend_from_slice(
        b"</h1>\n<table>\n<thead><tr><th>Name</th><th>Size</th><th>Modified</th></tr></thead>\n<tbody>\n",
    );
    if url_path != b"/" {
        out.extend_from_slice(b"<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for e in entries {
        let slash: &[u8] = if e.kind == Kind::Directory { b"/" } else { b"" };
        out.extend_from_slice(b"<tr><td><a href=\"");
        for chunk in percent_encode(&e.name, HREF) {
            out.extend_from_slice(chunk.as_bytes());
        }
        out.extend_from_slice(slash);
        out.extend_from_slice(b"\">");
        escape_html(&mut out, &e.name);
        out.extend_from_slice(slash);
        out.extend_from_slice(b"</a></td><td class=\"size\">");
        if e.kind == Kind::File {
            out.extend_from_slice(itoa::Buffer::new().format(e.size).as_bytes());
        } else {
            out.push(b'-');
        }
        out.extend_from_slice(b"</td><td>");
        out.extend_from_slice(&format_rfc3339(e.modified));
        out.extend_from_slice(b"</td></tr>\n");
    }
    out.extend_from_slice(b"</tbody>\n</table>\n</body>\n</html>\n");
    out
}

/// `bytes` as HTML text (invalid UTF-8 shown as U+FFFD).
fn escape_html(out: &mut Vec<u8>, bytes: &[u8]) {
    for b in String::from_utf8_lossy(bytes).bytes() {
        match b {
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            b'\'' => out.extend_from_slice(b"&#39;"),
            _ => out.push(b),
        }
    }
}

/// An entry as JSON; `size` only for files (as nginx's `autoindex_format
/// json`: a directory's or a link's own size means nothing to a reader).
#[derive(Serialize)]
struct JsonEntry<'a> {
    name: Cow<'a, str>,
    #[serde(rename = "type")]
    kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    modified: &'a str,
}

/// `entries` as a JSON array of `{"name", "type", "size", "modified"}`
/// (invalid UTF-8 in a name shown as U+FFFD; `modified` in RFC 3339, UTC).
pub fn json(entries: &[Entry]) -> Vec<u8> {
    let times: Vec<[u8; 20]> = entries.iter().map(|e| format_rfc3339(e.modified)).collect();
    let list: Vec<JsonEntry<'_>> = entries
        .iter()
        .zip(&times)
        .map(|(e, t)| JsonEntry {
            name: String::from_utf8_lossy(&e.name),
            kind: e.kind,
            size: (e.kind == Kind::File).then_some(e.size),
            modified: std::str::from_utf8(t).expect("ASCII"),
        })
        .collect();
    serde_json::to_vec(&list).expect("plain data serialises")
}

/// Does a client with these `Accept` values prefer JSON? True when
/// `application/json` is acceptable with a higher quality than `text/html`
/// (each taken from its most specific matching range); no `Accept`, `*/*`
/// or a browser's usual value means HTML.
pub fn wants_json<'a>(accept: impl IntoIterator<Item = &'a [u8]>) -> bool {
    // (specificity, quality) of the best matching range so far.
    let mut json: Option<(u8, qlist::Quality)> = None;
    let mut html: Option<(u8, qlist::Quality)> = None;
    for (range, q) in accept.into_iter().flat_map(qlist::elements) {
        let Some((ty, sub)) = range.iter().position(|&b| b == b'/').map(|i| (&range[..i], &range[i + 1..])) else {
            continue;
        };
        for (best, (want_ty, want_sub)) in [(&mut json, ("application", "json")), (&mut html, ("text", "html"))] {
            let specificity = match (ty.eq_ignore_ascii_case(want_ty.as_bytes()), sub) {
                (true, s) if s.eq_ignore_ascii_case(want_sub.as_bytes()) => 3,
                (true, b"*") => 2,
                _ if ty == b"*" && sub == b"*" => 1,
                _ => continue,
            };
            if best.is_none_or(|(s, _)| specificity > s) {
                *best = Some((specificity, q));
            }
        }
    }
    let quality = |best: Option<(u8, qlist::Quality)>| best.map_or(0, |(_, q)| q);
    quality(json) > 0 && quality(json) > quality(html)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn open_dir(path: &Path) -> std::fs::File {
        std::fs::File::open(path).unwrap()
    }

    /// A directory holding hostile names, with known sizes and times.
    fn hostile() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let names: [&[u8]; 9] = [
            b"a b.txt",
            b"<script>\"x\"&'.html",
            b"#frag",
            b"q?x=1",
            b"100%",
            b"caf\xc3\xa9",
            b"bad\xff",
            b"a:b",
            b"Z",
        ];
        for (i, name) in names.iter().enumerate() {
            let path = dir.path().join(OsStr::from_bytes(name));
            std::fs::write(&path, vec![b'x'; i]).unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(784_111_777)).unwrap();
        }
        std::fs::create_dir(dir.path().join("sub dir")).unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        std::fs::write(dir.path().join(".hidden"), "h").unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        std::os::unix::fs::symlink("a b.txt", dir.path().join("link")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.path().join("fifo"),
            FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        dir
    }

    #[test]
    fn reads_sorted_entries_without_hidden_names_or_fifos() {
        let dir = hostile();
        let entries = read(open_dir(dir.path())).unwrap();
        let names: Vec<&[u8]> = entries.iter().map(|e| e.name.as_slice()).collect();
        assert_eq!(
            names,
            [
                &b"b"[..],
                b"sub dir",
                b"#frag",
                b"100%",
                b"<script>\"x\"&'.html",
                b"Z",
                b"a b.txt",
                b"a:b",
                b"bad\xff",
                b"caf\xc3\xa9",
                b"link",
                b"q?x=1"
            ]
        );
        assert_eq!(entries[0].kind, Kind::Directory);
        let a = entries.iter().find(|e| e.name == b"a b.txt").unwrap();
        assert_eq!((a.kind, a.size, a.modified), (Kind::File, 0, 784_111_777));
        let z = entries.iter().find(|e| e.name == b"Z").unwrap();
        assert_eq!(z.size, 8);
        let link = entries.iter().find(|e| e.name == b"link").unwrap();
        assert_eq!((link.kind, link.size), (Kind::Symlink, 7));
        assert!(read(open_dir(tempfile::tempdir().unwrap().path())).unwrap().is_empty());
    }

    #[test]
    fn html_escapes_text_and_encodes_links() {
        let dir = hostile();
        let page = String::from_utf8(html(b"/a <b>/", &read(open_dir(dir.path())).unwrap())).unwrap();
        assert!(page.starts_with(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Index of /a &lt;b&gt;/</title>"
        ));
        assert!(page.contains("<h1>Index of /a &lt;b&gt;/</h1>"));
        assert!(page.contains(r#"<a href="../">../</a>"#));
        for row in [
            r#"<a href="sub%20dir/">sub dir/</a></td><td class="size">-</td>"#,
            r#"<a href="a%20b.txt">a b.txt</a></td><td class="size">0</td><td>1994-11-06T08:49:37Z</td>"#,
            r#"<a href="%3Cscript%3E%22x%22%26%27.html">&lt;script&gt;&quot;x&quot;&amp;&#39;.html</a>"#,
            r#"<a href="%23frag">#frag</a>"#,
            r#"<a href="q%3Fx%3D1">q?x=1</a>"#,
            r#"<a href="100%25">100%</a>"#,
            r#"<a href="caf%C3%A9">café</a>"#,
            r#"<a href="bad%FF">bad�</a>"#,
            r#"<a href="a%3Ab">a:b</a>"#,
            r#"<a href="link">link</a></td><td class="size">-</td>"#,
        ] {
            assert!(page.contains(row), "{row} not in\n{page}");
        }
        assert!(!page.contains("hidden") && !page.contains(".git") && !page.contains("fifo"));
        assert!(page.ends_with("</tbody>\n</table>\n</body>\n</html>\n"));
        let root = String::from_utf8(html(b"/", &[])).unwrap();
        assert!(!root.contains("../") && root.contains("<title>Index of /</title>"));
    }

    #[test]
    fn json_lists_types_sizes_and_times() {
        let dir = hostile();
        let list: serde_json::Value = serde_json::from_slice(&json(&read(open_dir(dir.path())).unwrap())).unwrap();
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), 12);
        assert_eq!(list[0], serde_json::json!({"name": "b", "type": "directory", "modified": list[0]["modified"]}));
        let by_name = |n: &str| list.iter().find(|e| e["name"] == n).unwrap().clone();
        assert_eq!(
            by_name("<script>\"x\"&'.html"),
            serde_json::json!({"name": "<script>\"x\"&'.html", "type": "file", "size": 1, "modified": "1994-11-06T08:49:37Z"})
        );
        assert_eq!(by_name("bad\u{fffd}")["type"], "file");
        assert_eq!(by_name("café")["size"], 5);
        assert_eq!(by_name("link")["type"], "symlink");
        assert!(by_name("link").get("size").is_none());
        assert_eq!(json(&[]), b"[]");
    }

    #[test]
    fn json_only_when_preferred() {
        let wants = |values: &[&str]| wants_json(values.iter().map(|v| v.as_bytes()));
        assert!(!wants(&[]));
        assert!(!wants(&["*/*"]));
        assert!(!wants(&["text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"]));
        assert!(wants(&["application/json"]));
        assert!(wants(&["Application/JSON"]));
        assert!(wants(&["application/json, text/html;q=0.5"]));
        assert!(wants(&["text/html;q=0.5", "application/json"]));
        assert!(wants(&["application/*"]));
        assert!(wants(&["application/json, */*;q=0.1"]));
        assert!(!wants(&["application/json, text/html"]));
        assert!(!wants(&["application/json;q=0.5, text/html;q=0.5"]));
        assert!(!wants(&["application/json;q=0"]));
        assert!(!wants(&["application/json;q=0, */*"]));
        assert!(!wants(&["text/*, application/json;q=0.9"]));
        assert!(wants(&["text/*;q=0.1, application/json"]));
        assert!(!wants(&["application/json;q=2"]), "an invalid qvalue drops the range");
        assert!(!wants(&["json", "application"]));
    }
}
