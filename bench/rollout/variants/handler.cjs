// The app every variant serves (CommonJS, so pm2's cluster mode can load it too):
//   GET /            200 "hello"
//   GET /slow?ms=N   logs "fixture request started", answers after N ms with 100 KB
//   POST /echo       the length of the body it read
//   GET /readyz      200 "ready": a plain app has no idea it is shutting down
// PORT is where to listen (on 127.0.0.1).
'use strict';
const BIG = 'x'.repeat(100_000);

function handle(request, response) {
	const url = new URL(request.url, 'http://localhost');
	if (url.pathname === '/slow') {
		process.stdout.write(`${JSON.stringify({msg: 'fixture request started', pid: process.pid, id: url.searchParams.get('id')})}\n`);
		setTimeout(() => {
			response.end(BIG);
		}, Number(url.searchParams.get('ms') ?? 1000));
		return;
	}

	if (url.pathname === '/echo') {
		let length = 0;
		request.on('data', chunk => {
			length += chunk.length;
		});
		request.on('end', () => {
			response.end(String(length));
		});
		return;
	}

	if (url.pathname === '/readyz') {
		response.end('ready\n');
		return;
	}

	response.end('hello');
}

const port = Number(process.env.PORT ?? 0);
const host = '127.0.0.1';

module.exports = {handle, port, host};
