// A Fastify 5 app run by graceful-cluster:
//   npx graceful-cluster --workers 2 examples/fastify/server.js
//
// Nothing graceful-cluster-specific: fastify.server is drained as it listens
// (new requests in the reject phase get the drain's 503 before Fastify runs),
// and the shutdown Fastify's docs show, close-with-grace calling
// fastify.close(), runs once every request has finished, so its onClose hooks
// (database plugins) run to their end.
import {setTimeout as sleep} from 'node:timers/promises';
import Fastify from 'fastify';
import closeWithGrace from 'close-with-grace';

const port = Number(process.env.PORT ?? 3000);

const fastify = Fastify({
	logger: false,
	// Fastify sets 72 s; the drain replaces it with --keep-alive-timeout (65 s by
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

closeWithGrace({delay: 10_000}, async () => {
	await fastify.close();
});

// An explicit host: Fastify's default 'localhost' is not reachable from outside
// a container.
await fastify.listen({port, host: process.env.HOST ?? '0.0.0.0'});
