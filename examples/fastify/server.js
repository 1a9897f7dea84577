// A Fastify 5 app run by graceful-cluster:
//   npx graceful-cluster --workers 2 examples/fastify/server.js
//
// attach(fastify.server) puts the drain in front of Fastify's request handler.
// graceful-cluster never calls fastify.close() during the drain: it rejects new
// requests itself (503 + Connection: close + Retry-After) and closes the server
// once the reject phase is over. Fastify's own shutdown features must not fight
// that, hence the options below. Call fastify.close() from onShutdown(), when
// every request has finished, so that Fastify's onClose hooks (database
// plugins) still run.
//
// Remove close-with-grace or any SIGTERM handler that calls fastify.close():
// it would close the server at the signal, before the load balancer has
// noticed, and clients would see refused connections instead of the drain.
import {setTimeout as sleep} from 'node:timers/promises';
import Fastify from 'fastify';
import {attach} from 'graceful-cluster/worker';

const port = Number(process.env.PORT ?? 3000);

const fastify = Fastify({
	logger: false,
	// Fastify's 503 after close() has no Retry-After and comes from Fastify's
	// timeline, not ours. With false, a request that reaches Fastify after
	// close() is served (with Connection: close) instead; in practice none does,
	// because close() only runs from onShutdown below.
	return503OnClosing: false,
	// Connections are graceful-cluster's business: it closes idle keep-alive
	// sockets when it stops listening and the rest after their last response.
	// true would make close() destroy sockets that still carry a request.
	forceCloseConnections: false,
	// Fastify sets 72 s; attach() replaces it with --keep-alive-timeout (65 s by
	// default, above an ALB's 60 s idle timeout). Pass --keep-alive-timeout 0 to
	// keep this value instead.
	keepAliveTimeout: 72_000,
});

fastify.get('/', async () => `hello from fastify (pid ${process.pid})\n`);

// /slow?ms=5000&size=100000 answers after ms with a body of size bytes.
fastify.get('/slow', async request => {
	const ms = Math.min(Number(request.query.ms ?? 1000), 60_000);
	const size = Math.min(Number(request.query.size ?? 0), 10_000_000);
	console.log(JSON.stringify({msg: 'example: slow request started', ms, pid: process.pid}));
	await sleep(ms);
	return `waited ${ms} ms\n`.padEnd(size, '.');
});

fastify.addHook('onClose', async () => {
	// Plugins' own onClose hooks (database pools, ...) run here too.
	console.log(JSON.stringify({msg: 'example: shutdown hook ran', pid: process.pid}));
});

// Attach before listen() so that no request is missed.
attach(fastify.server).onShutdown(() => fastify.close());

// An explicit host: Fastify's default 'localhost' is not reachable from outside
// a container, and may add a second server for ::1 that attach() does not see.
await fastify.listen({port, host: process.env.HOST ?? '0.0.0.0'});
