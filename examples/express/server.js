// An Express 5 app run by graceful-cluster:
//   npx graceful-cluster --workers 2 examples/express/server.js
//
// Nothing graceful-cluster-specific: the server app.listen() makes is drained as
// it listens, and the app's own SIGTERM handler runs once every request has
// finished. Do not set server.keepAliveTimeout yourself: --keep-alive-timeout
// (default 65s, above an ALB's 60 s idle timeout) is applied to it, and Node's
// own 5 s default is what causes 502s behind a load balancer.
import {setTimeout as sleep} from 'node:timers/promises';
import express from 'express';

const port = Number(process.env.PORT ?? 3000);
const app = express();

app.get('/', (_request, response) => {
	response.type('text/plain').send(`hello from express (pid ${process.pid})\n`);
});

// /slow?ms=5000&size=100000 answers after ms with a body of size bytes.
app.get('/slow', async (request, response) => {
	const ms = Math.min(Number(request.query.ms ?? 1000), 60_000);
	const size = Math.min(Number(request.query.size ?? 0), 10_000_000);
	console.log(JSON.stringify({msg: 'example: slow request started', ms, pid: process.pid}));
	await sleep(ms);
	response.type('text/plain').send(`waited ${ms} ms\n`.padEnd(size, '.'));
});

const server = app.listen(port, error => {
	if (error) {
		throw error;
	}
});

process.on('SIGTERM', () => {
	// Every request has finished here: close the server, database pools, flush queues.
	server.close(() => {
		console.log(JSON.stringify({msg: 'example: shutdown hook ran', pid: process.pid}));
	});
});
