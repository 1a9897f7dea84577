// A Koa 3 app run by graceful-cluster:
//   npx graceful-cluster --workers 2 examples/koa/server.js
//
// app.listen() returns the node:http server; attach() puts the drain in front
// of Koa's request handler, so the probes and the drain 503s never reach the
// middleware stack. http.createServer(app.callback()) works the same way.
import {setTimeout as sleep} from 'node:timers/promises';
import Koa from 'koa';
import {attach} from 'graceful-cluster/worker';

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

attach(server).onShutdown(async () => {
	// Every request has finished here: close database pools, flush queues.
	console.log(JSON.stringify({msg: 'example: shutdown hook ran', pid: process.pid}));
});
