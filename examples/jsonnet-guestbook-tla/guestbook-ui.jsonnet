// The guestbook as a function of top-level arguments: an Application sets them with
// spec.source.directory.jsonnet.tlas (`code: true` for numbers). (The layout of Argo CD's
// argocd-example-apps `jsonnet-guestbook-tla`, Apache-2.0; see examples/README.md.)
function(
  name='jsonnet-guestbook-ui',
  image='quay.io/argoprojlabs/argocd-e2e-container:0.2',
  replicas=1,
  containerPort=80,
  servicePort=80,
  type='LoadBalancer',
)
  local labels = { app: name };
  [
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: name },
      spec: {
        type: type,
        selector: labels,
        ports: [{ port: servicePort, targetPort: containerPort }],
      },
    },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: name },
      spec: {
        replicas: replicas,
        revisionHistoryLimit: 3,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels: labels },
          spec: {
            containers: [{
              name: name,
              image: image,
              ports: [{ containerPort: containerPort }],
            }],
          },
        },
      },
    },
  ]
