// The benchmark's hello-world server. One file for every variant, chosen by env:
//   BENCH_WRAP = none | attach | terminus | http-terminator | lightship
//   PORT       = port to listen on (127.0.0.1 only)
// Routes: /  -> "hello world"; /slow?ms=N -> answers after N ms; /hang -> never
// answers; /mem -> runs gc (needs --expose-gc) and answers process.memoryUsage().
// Prints one JSON line {msg: 'listening', port, pid} once it listens.
import http from 'node:http';
import process from 'node:process';

const wrap = process.env.BENCH_WRAP ?? 'none';
const port = Number(process.env.PORT ?? 0);
const HELLO = Buffer.from('hello world');

const server = http.createServer((request, response) => {
	const url = request.url;
	if (url === '/') {
		response.writeHead(200, {'Content-Type': 'text/plain', 'Content-Length': HELLO.length});
		response.end(HELLO);
		return;
	}

	if (url.startsWith('/slow')) {
		const ms = Number(new URL(url, 'http://x').searchParams.get('ms') ?? 1000);
		setTimeout(() => response.end('slow done'), ms);
		return;
	}

	if (url === '/hang') {
		return;
	}

	if (url === '/mem') {
		globalThis.gc?.();
		globalThis.gc?.();
		response.end(JSON.stringify({pid: process.pid, ...process.memoryUsage()}));
		return;
	}

	response.statusCode = 404;
	response.end();
});

switch (wrap) {
	case 'none': {
		break;
	}

	case 'attach': {
		// By path, from the copy of dist/ under test (BENCH_DIST, set by the bench);
		// bench/ has its own package.json, so 'graceful-cluster/worker' would not
		// resolve from here anyway.
		// BENCH_WORKER: the helper's file itself (the benches give the bundle's).
		const {attach} = await import(process.env.BENCH_WORKER ?? `${process.env.BENCH_DIST ?? new URL('../../dist', import.meta.url).pathname}/src/worker/index.js`);
		attach(server);
		break;
	}

	case 'terminus': {
		const {createTerminus} = await import('@godaddy/terminus');
		createTerminus(server, {
			signals: ['SIGTERM', 'SIGINT'],
			healthChecks: {'/readyz': async () => {}, '/livez': async () => {}},
			timeout: 20_000,
		});
		break;
	}

	case 'http-terminator': {
		const {createHttpTerminator} = await import('http-terminator');
		const terminator = createHttpTerminator({server, gracefulTerminationTimeout: 20_000});
		process.once('SIGTERM', () => {
			void terminator.terminate().then(() => process.exit(0));
		});
		break;
	}

	case 'lightship': {
		const {createLightship} = await import('lightship');
		// Its probes run on a separate fastify server; port 0 so the two workers of
		// a cluster do not fight over 9000.
		const lightship = await createLightship({detectKubernetes: false, port: 0, shutdownDelay: 0});
		lightship.registerShutdownHandler(() => new Promise(resolve => {
			server.close(() => resolve());
		}));
		server.once('listening', () => lightship.signalReady());
		break;
	}

	default: {
		throw new Error(`unknown BENCH_WRAP ${wrap}`);
	}
}

server.listen(port, '127.0.0.1', () => {
	process.stdout.write(`${JSON.stringify({msg: 'listening', port: server.address().port, pid: process.pid, time: Date.now()})}\n`);
});
