<?php
// The demo site's PHP page: run by php-fpm through tern's FastCGI client
// (site/tern.toml, [fastcgi.backends.php]; start php-fpm with site/php-fpm.sh).
header('Content-Type: text/html; charset=utf-8');
$name = isset($_POST['name']) ? trim($_POST['name']) : '';
$h = fn($s) => htmlspecialchars((string) $s, ENT_QUOTES, 'UTF-8');
$shown = ['SCRIPT_NAME', 'PATH_INFO', 'QUERY_STRING', 'REQUEST_METHOD', 'REQUEST_URI', 'SERVER_SOFTWARE',
          'GATEWAY_INTERFACE', 'REMOTE_ADDR', 'HTTP_USER_AGENT'];
?>
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>PHP through FastCGI — tern</title>
<link rel="stylesheet" href="/css/style.css">
</head>
<body>
<main>
<h1>PHP through FastCGI</h1>
<p>This page is PHP <?= $h(PHP_VERSION) ?>, run by php-fpm (process <?= getmypid() ?>) and
relayed by tern over a kept-alive, pooled FastCGI connection.</p>
<?php if ($name !== ''): ?>
<p><strong>Hello, <?= $h($name) ?>!</strong> (a POST body, sent to PHP on FCGI_STDIN)</p>
<?php endif ?>
<form method="post" action="/php/index.php/form?from=demo">
  <label>Your name <input name="name" value="<?= $h($name) ?>"></label>
  <button>Send</button>
</form>
<h2>What PHP sees</h2>
<table>
<?php foreach ($shown as $k): ?>
<tr><th><?= $h($k) ?></th><td><code><?= $h($_SERVER[$k] ?? '(unset)') ?></code></td></tr>
<?php endforeach ?>
</table>
<p>The pool behind it: <a href="/_tern/status">/_tern/status</a> (<code>fastcgi.backends.php</code>).</p>
<p><a href="/">Back to the demo site</a></p>
</main>
</body>
</html>
