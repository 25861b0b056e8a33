// The guestbook's parameters, imported by guestbook-ui.jsonnet. (The layout of Argo CD's
// argocd-example-apps `jsonnet-guestbook`, Apache-2.0; see examples/README.md.)
{
  name: 'jsonnet-guestbook-ui',
  image: 'quay.io/argoprojlabs/argocd-e2e-container:0.2',
  replicas: 1,
  containerPort: 80,
  servicePort: 80,
  type: 'LoadBalancer',
}
