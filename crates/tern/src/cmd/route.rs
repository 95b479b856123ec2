//! `tern route`: which site and location a request reaches, and why.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use tern_server::compress::Compression;
use tern_server::site::Sites;
use tern_server::Config;

#[derive(clap::Args)]
#[command(after_help = "\
EXAMPLES:
    tern route --config tern.toml http://shop.example/api/orders?id=7
    tern route --config tern.toml /private/report.pdf -H 'Host: intranet.example'
    tern route --config tern.toml https://shop.example/ --sni www.example

It loads the configuration as `tern serve` would (opening its directories and
htpasswd files, binding nothing), then prints the site the host reaches, every
location rule looked at and why it matched or not, and what would be answered:
the file, the redirect's target, the fixed response, the CGI program or the
FastCGI backend. Nothing is sent anywhere.")]
pub struct Args {
    /// TOML configuration file.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// The request: a URL (`http://host/path?query`, its host the `Host`)
    /// or a path (`/path?query`).
    pub url: String,
    /// A request header field (repeatable), e.g. `-H 'Host: shop.example'`.
    #[arg(short = 'H', long = "header", value_name = "FIELD")]
    pub headers: Vec<String>,
    /// The request method.
    #[arg(short = 'X', long, value_name = "METHOD", default_value = "GET")]
    pub method: String,
    /// The name a TLS client asks for (SNI), for an HTTPS request: a name
    /// that chooses another site than the host is answered 421. Default:
    /// the URL's host for an `https://` URL.
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(&args.config)?;
    // Routing needs no compression threads.
    config.compression.background_threads = 0;
    let compression = Compression::start(&config.compression).context("compression")?;
    let sites = Sites::new(config.sites(), compression, Default::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (https, authority, target) = split_url(&args.url)?;
    let mut head = format!("{} {target} HTTP/1.1\r\n", args.method);
    let has_host =
        args.headers.iter().any(|h| h.split(':').next().is_some_and(|n| n.trim().eq_ignore_ascii_case("host")));
    if let (Some(authority), false) = (authority, has_host) {
        head.push_str(&format!("Host: {authority}\r\n"));
    }
    for h in &args.headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let sni = args.sni.as_deref().or(authority.filter(|_| https).map(|a| a.split(':').next().unwrap_or(a)));
    let route = sites.explain(head.as_bytes(), https || args.sni.is_some(), sni);
    for (i, note) in route.notes.iter().enumerate() {
        println!("{:>2}. {note}", i + 1);
    }
    println!("=> {}", route.answer);
    sites.stop();
    Ok(ExitCode::SUCCESS)
}

/// `(https, authority, path and query)` of a URL or a bare path.
fn split_url(url: &str) -> anyhow::Result<(bool, Option<&str>, String)> {
    let (https, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ if url.starts_with('/') => return Ok((false, None, url.to_string())),
        _ => bail!("`{url}` is neither an http:// or https:// URL nor a path starting with /"),
    };
    let at = rest.find(['/', '?']).unwrap_or(rest.len());
    // `http://host` and `http://host?q` have the path `/`.
    let target = match &rest[at..] {
        t if t.starts_with('/') => t.to_string(),
        t => format!("/{t}"),
    };
    Ok((https, Some(&rest[..at]), target))
}

#[cfg(test)]
mod tests {
    use super::split_url;

    #[test]
    fn urls_and_paths() {
        let split = |u| split_url(u).unwrap();
        assert_eq!(split("http://a.test/x?y"), (false, Some("a.test"), "/x?y".to_string()));
        assert_eq!(split("https://a.test:8443"), (true, Some("a.test:8443"), "/".to_string()));
        assert_eq!(split("http://a.test?q=1"), (false, Some("a.test"), "/?q=1".to_string()));
        assert_eq!(split("/p"), (false, None, "/p".to_string()));
        assert!(split_url("a.test/p").is_err());
    }
}
