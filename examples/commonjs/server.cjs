// A plain node:http app written as CommonJS, run by graceful-cluster:
//   npx graceful-cluster --workers 2 examples/commonjs/server.cjs
// The helper is an ES module; Node 20.19+ and 22.12+ load it with require().
'use strict';

const http = require('node:http');
const {attach} = require('graceful-cluster/worker');

const port = Number(process.env.PORT ?? 3000);

const server = http.createServer((request, response) => {
	const url = new URL(request.url ?? '/', 'http://localhost');
	if (url.pathname === '/slow') {
		// /slow?ms=5000&size=100000 answers after ms with a body of size bytes:
		// start one, send SIGTERM to the primary, watch it finish.
		const ms = Math.min(Number(url.searchParams.get('ms') ?? 1000), 60_000);
		const size = Math.min(Number(url.searchParams.get('size') ?? 0), 10_000_000);
		console.log(JSON.stringify({msg: 'example: slow request started', ms, pid: process.pid}));
		setTimeout(() => {
			response.end(`waited ${ms} ms\n`.padEnd(size, '.'));
		}, ms);
		return;
	}

	response.end(`hello from commonjs (pid ${process.pid})\n`);
});

// attach() before or after listen(): probes, the drain 503s and the in-flight
// count are handled in front of the handler above.
attach(server).onShutdown(async () => {
	// Every request has finished here: close database pools, flush queues.
	console.log(JSON.stringify({msg: 'example: shutdown hook ran', pid: process.pid}));
});

server.listen(port);
