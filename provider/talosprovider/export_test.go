package talosprovider

// DevVersionOf is devVersion, for the tests.
var DevVersionOf = devVersion
