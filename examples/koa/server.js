// A Koa 3 app run by graceful-cluster:
//   npx graceful-cluster --workers 2 examples/koa/server.js
//
// Nothing graceful-cluster-specific: the server app.listen() makes is drained as
// it listens (the probes and the drain 503s never reach the middleware stack), and
// the app's own SIGTERM handler runs once every request has finished.
// http.createServer(app.callback()) works the same way.
import {setTimeout as sleep} from 'node:timers/promises';
import Koa from 'koa';

const port = Number(process.env.PORT ?? 3000);
const app = new Koa();

app.use(async context => {
	if (context.path === '/slow') {
		// /slow?ms=5000&size=100000 answers after ms with a body of size bytes.
		const ms = Math.min(Number(context.query.ms ?? 1000), 60_000);
		const size = Math.min(Number(context.query.size ?? 0), 10_000_000);
		console.log(JSON.stringify({msg: 'example: slow request started', ms, pid: process.pid}));
		await sleep(ms);
		context.body = `waited ${ms} ms\n`.padEnd(size, '.');
		return;
	}

	context.body = `hello from koa (pid ${process.pid})\n`;
});

const server = app.listen(port);

process.on('SIGTERM', () => {
	// Every request has finished here: close the server, database pools, flush queues.
	server.close(() => {
		console.log(JSON.stringify({msg: 'example: shutdown hook ran', pid: process.pid}));
	});
});
