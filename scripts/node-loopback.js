'use strict';
// Preloaded into Node with NODE_OPTIONS='--require "…/node-loopback.js"' by
// scripts/local-servers, for kinesis-mock (npm package `kinesis-local`): the
// Kinesis engine that LocalStack runs, and the fanout profile's Kinesis. It
// has no option for its listen address and binds 0.0.0.0 (its HTTP and its
// HTTPS port); this module rewrites every TCP `listen()` in the process so
// that it binds 127.0.0.1 instead. A host that is already a loopback address
// is kept; Unix sockets, named pipes, handles and file descriptors are left
// alone. http, https, tls and http2 servers all inherit `listen()` from
// net.Server, so patching it once covers them all.
const net = require('net');

const LOOPBACK = '127.0.0.1';
const originalListen = net.Server.prototype.listen;

function isLoopback(host) {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

function isPortLike(value) {
  return (
    value === undefined ||
    value === null ||
    typeof value === 'number' ||
    (typeof value === 'string' && /^\d+$/.test(value))
  );
}

function forceLoopback(args) {
  const first = args[0];
  if (first !== null && typeof first === 'object') {
    // listen(options[, cb]): only TCP options (no handle/fd/path) are rewritten.
    const isTcp =
      !Array.isArray(first) &&
      first.handle === undefined &&
      first._handle === undefined &&
      first.fd === undefined &&
      first.path === undefined;
    if (!isTcp || (typeof first.host === 'string' && isLoopback(first.host))) {
      return args;
    }
    return [Object.assign({}, first, { host: LOOPBACK }), ...args.slice(1)];
  }
  if (!isPortLike(first)) {
    return args; // listen(path): a Unix socket or pipe
  }
  const port = first === undefined || first === null ? 0 : first;
  if (typeof args[1] === 'string') {
    // listen(port, host[, backlog][, cb])
    return isLoopback(args[1]) ? args : [port, LOOPBACK, ...args.slice(2)];
  }
  // listen([port][, backlog][, cb]): insert the host after the port.
  return [port, LOOPBACK, ...args.slice(1)];
}

net.Server.prototype.listen = function listenOnLoopback(...args) {
  return originalListen.apply(this, forceLoopback(args));
};
