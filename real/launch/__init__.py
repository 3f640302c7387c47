"""Starting things: a whole job on one machine or one node's workers (`local`), the
`ooblab run | coordinator | node | worker | profile` commands (`cli`), the layer
profiler (`profiler`) and the plain-pipelining baseline (`baseline`). May import every
other part of `real`."""
