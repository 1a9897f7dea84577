// An HTTP/2 app run by graceful-cluster. With TLS_KEY and TLS_CERT (paths to PEM
// files) it serves HTTP/2 over TLS and, for older clients, HTTP/1.1 on the same
// port (allowHTTP1); without them, cleartext HTTP/2 (h2c), as behind a proxy
// that speaks it:
//   npx graceful-cluster --workers 2 examples/http2/server.js
//   curl --http2-prior-knowledge localhost:3000/
// On SIGTERM every HTTP/2 connection gets a GOAWAY, so clients open new
// connections elsewhere, while the streams in flight finish; no line of the app
// asks for it.
import {readFileSync} from 'node:fs';
import http2 from 'node:http2';

const port = Number(process.env.PORT ?? 3000);
const tls = process.env.TLS_KEY && process.env.TLS_CERT
	? {key: readFileSync(process.env.TLS_KEY), cert: readFileSync(process.env.TLS_CERT), allowHTTP1: true}
	: undefined;

// The compatibility API: (request, response) as with node:http. Apps on the
// 'stream' API are drained the same way.
const onRequest = (request, response) => {
	const url = new URL(request.url ?? '/', 'http://localhost');
	if (url.pathname === '/slow') {
		// /slow?ms=5000&size=100000 answers after ms with a body of size bytes.
		const ms = Math.min(Number(url.searchParams.get('ms') ?? 1000), 60_000);
		const size = Math.min(Number(url.searchParams.get('size') ?? 0), 10_000_000);
		console.log(JSON.stringify({msg: 'example: slow request started', ms, pid: process.pid}));
		setTimeout(() => {
			response.end(`waited ${ms} ms\n`.padEnd(size, '.'));
		}, ms);
		return;
	}

	response.end(`hello from http2 over HTTP/${request.httpVersion} (pid ${process.pid})\n`);
};

const server = tls ? http2.createSecureServer(tls, onRequest) : http2.createServer(onRequest);

process.on('SIGTERM', () => {
	// Every stream has finished here: close database pools, flush queues.
	console.log(JSON.stringify({msg: 'example: shutdown hook ran', pid: process.pid}));
	server.close();
});

server.listen(port);
